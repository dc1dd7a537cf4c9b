"""``sapporo capi amuse``: the opt-in patch of ph4's first upload, and its pip command."""

from __future__ import annotations

from pathlib import Path

import pytest

from sapporo.cli import main
from sapporo.cli.capi import (
    PH4_IDATA,
    PH4_UPLOAD,
    amuse_pip_command,
    patch_ph4_initial_upload,
)
from sapporo.errors import SapporoError

# A stand-in for ph4's idata.cc, written for this test: the function to patch, and another
# function whose scatter() must stay alone.
SETUP = """\
void idata::setup()
{
    if (jdat) {
\tgather();
\tget_acc_and_jerk();\t\t// first forces
\tscatter();\t\t\t// back to the j-arrays
    } else
\tcout << "no jdata" << endl;
}
"""
STEP = """\
void idata::step()
{
    scatter();
    if (jdat->use_gpu) update_gpu();
}
"""


def sdist(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "amuse_ph4-2024.6.0" / PH4_IDATA
    path.parent.mkdir(parents=True)
    path.write_text(text)
    return path.parents[len(Path(PH4_IDATA).parts) - 1]


def test_patch_adds_the_upload_after_the_first_forces(tmp_path):
    root = sdist(tmp_path, "#include <x>\n\n" + SETUP + "\n" + STEP)
    changed = patch_ph4_initial_upload(root)
    assert changed == root / PH4_IDATA
    lines = changed.read_text().splitlines()
    at = lines.index("\tscatter();\t\t\t// back to the j-arrays")
    assert lines[at + 1].startswith(f"\t{PH4_UPLOAD}\t// added by sapporo capi amuse")
    assert lines[at + 2] == "    } else"
    assert changed.read_text().count(PH4_UPLOAD) == 2  # step() is left as it was
    with pytest.raises(SapporoError, match="already calls update_gpu"):
        patch_ph4_initial_upload(root)  # never twice


@pytest.mark.parametrize("text, words", [
    (STEP, "no idata::setup"),
    (SETUP.replace("\tscatter();", "\tscatter();\n\tscatter();"), "found 2"),
    (SETUP.replace("\tscatter();", "\tscatter_all();"), "found 0"),
])
def test_patch_refuses_an_unexpected_source_and_changes_nothing(tmp_path, text, words):
    root = sdist(tmp_path, text)
    with pytest.raises(SapporoError, match=words):
        patch_ph4_initial_upload(root)
    assert (root / PH4_IDATA).read_text() == text


def test_patch_names_a_missing_file(tmp_path):
    with pytest.raises(SapporoError, match="cannot patch ph4"):
        patch_ph4_initial_upload(tmp_path)


def test_pip_command_builds_ph4_from_the_patched_folder(tmp_path):
    plain = amuse_pip_command("py", "2024.6.0")
    assert plain[-2:] == ["amuse-ph4==2024.6.0", "amuse-phigrape==2024.6.0"]
    patched = amuse_pip_command("py", "2024.6.0", tmp_path)
    assert patched[-2:] == [str(tmp_path), "amuse-phigrape==2024.6.0"]
    assert patched[:-2] == plain[:-2]


def test_patch_needs_install(tmp_path, capsys):
    rc = main(["capi", "amuse", "--prefix", str(tmp_path), "--patch-ph4-initial-upload"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "--patch-ph4-initial-upload" in err and "--install" in err
    assert not any(tmp_path.iterdir())  # refused before building anything
