"""The host/kernel data layout: one header, read by the host, included by both trees."""

from __future__ import annotations

import re

import pytest

from sapporo import layout
from sapporo.backend.base import load_source


def test_header_is_parsed_completely() -> None:
    """Every integer #define of layout.h is in LAYOUT, with its value (checked by an
    independent reading of the file), and the row groups are dense and distinct."""
    text = layout.LAYOUT_HEADER.read_text()
    defined = dict(re.findall(r"^#define (\w+) (\d+)", text, re.MULTILINE))
    assert {k: int(v) for k, v in defined.items()} == layout.LAYOUT
    for prefix, count in (("RAW_", "RAW_N"), ("OC_", "NCO")):
        rows = sorted(v for k, v in layout.LAYOUT.items() if k.startswith(prefix)
                      and k != count)
        assert rows == list(range(layout.LAYOUT[count])), prefix
    ic = sorted(v for k, v in layout.LAYOUT.items() if k.startswith("IC_"))
    assert ic == list(range(layout.nci(6)))
    assert layout.nci(4) == layout.LAYOUT["IC_ID"] + 1  # orders < 6 stop after the id


@pytest.mark.parametrize("language, fname", [("opencl", "force.cl"), ("cuda", "force.cu")])
def test_both_trees_inline_the_shared_header(language, fname) -> None:
    source = load_source(language, fname)
    assert "/* begin layout.h */" in source
    assert source.count("#define SAPPORO_LAYOUT_H") == 1


def test_result_rows_by_order() -> None:
    assert layout.result_rows(2) == [0, 1, 2, 3]
    assert layout.result_rows(4) == [0, 1, 2, 3, 4, 5, 6]
    assert layout.result_rows(6) == [0, 1, 2, 3, 4, 5, 6, 8, 9, 10]


def test_kernel_args_by_name() -> None:
    values = {a.name: a.name for a in layout.FORCE_ARGS}
    args = layout.kernel_args(layout.FORCE_ARGS, values, order=4, ds=False, ngb=False)
    assert "jpos_lo" not in args and "jacc" not in args and "nb_list" not in args
    assert layout.arg_index(layout.FORCE_ARGS, "eps2_d", 6, True, True) == 4
    with pytest.raises(KeyError, match="jid"):
        layout.kernel_args(layout.FORCE_ARGS, {k: 0 for k in values if k != "jid"}, 4, True)
