"""The host/kernel data layout: one header, read by the host, included by both trees."""

from __future__ import annotations

import re

import pytest

from sapporo.backend.base import load_source
from sapporo.core import layout


def test_header_is_parsed_completely() -> None:
    """Every integer #define of layout.h is in LAYOUT, with its value (checked by an
    independent reading of the file), and the row groups are dense and distinct."""
    text = layout.LAYOUT_HEADER.read_text()
    defined = dict(re.findall(r"^#define (\w+) (\d+)(?![\w.])", text, re.MULTILINE))
    assert {k: int(v) for k, v in defined.items()} == layout.LAYOUT
    raw = sorted(v for k, v in layout.LAYOUT.items()
                 if k.startswith("RAW_") and not k.startswith("RAW_N"))
    assert raw == list(range(layout.raw_n(8)))
    # orders 2 to 6 keep six raw records; order 8 adds pop and the 5th derivative
    assert layout.raw_n(2) == layout.raw_n(6) == layout.RAW_N == layout.LAYOUT["RAW_C"] + 1
    assert layout.raw_n(8) == layout.LAYOUT["RAW_D5"] + 1 == 8
    oc = sorted(v for k, v in layout.LAYOUT.items() if k.startswith("OC_"))
    assert oc == list(range(layout.nco(8)))
    # orders 2 to 6 keep twelve result rows; order 8 adds the crackle rows after them
    assert layout.nco(2) == layout.nco(4) == layout.nco(6) == layout.NCO == 12
    assert layout.nco(8) == layout.LAYOUT["OC_CZ"] + 1 == 15
    assert layout.LAYOUT["OC_CX"] == layout.nco(6)
    ic = sorted(v for k, v in layout.LAYOUT.items()
                if k.startswith("IC_") and k not in ("IC_J0", "IC_J1"))
    assert ic == list(range(layout.nci(8)))
    # order 2 reads no velocity: its j-range rows are the velocity's
    assert (layout.LAYOUT["IC_J0"], layout.LAYOUT["IC_J1"]) == (layout.LAYOUT["IC_VX"],
                                                                layout.LAYOUT["IC_VY"])
    assert layout.nci(4) == layout.LAYOUT["IC_ID"] + 1  # orders < 6 stop after the id
    assert layout.nci(6) == layout.LAYOUT["IC_AZ"] + 1 == 11  # order 6: + acceleration
    assert layout.nci(8) == layout.LAYOUT["IC_JZ"] + 1 == 14  # order 8: + jerk


@pytest.mark.parametrize("order", [2, 4, 6, 8])
def test_conditional_counts_follow_order(order) -> None:
    """RAW_N, NCI and NCO are chosen by ORDER in layout.h: the preprocessor's choice (evaluated
    here by hand from the #if chain) is what nci() and nco() say."""
    text = layout.LAYOUT_HEADER.read_text()
    for name, func in (("RAW_N", layout.raw_n), ("NCI", layout.nci), ("NCO", layout.nco)):
        chain = re.findall(rf"^#(?:el)?if ORDER >= (\d+)\n#define {name} (\w+)$", text,
                           re.MULTILINE)
        default = re.search(rf"^#else\n#define {name} (\w+)$", text, re.MULTILINE).group(1)
        chosen = next((sym for bound, sym in chain if order >= int(bound)), default)
        assert layout.LAYOUT[chosen] == func(order), (name, order)


@pytest.mark.parametrize("language, fname", [("opencl", "force.cl"), ("cuda", "force.cu")])
def test_both_trees_inline_the_shared_header(language, fname) -> None:
    source = load_source(language, fname)
    assert "/* begin layout.h */" in source
    assert source.count("#define SAPPORO_LAYOUT_H") == 1


def test_result_rows_by_order() -> None:
    assert layout.result_rows(2) == [0, 1, 2, 3]
    assert layout.result_rows(4) == [0, 1, 2, 3, 4, 5, 6]
    assert layout.result_rows(6) == [0, 1, 2, 3, 4, 5, 6, 8, 9, 10]
    assert layout.result_rows(8) == [0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 12, 13, 14]


def test_kernel_args_by_name() -> None:
    values = {a.name: a.name for a in layout.FORCE_ARGS}
    args = layout.kernel_args(layout.FORCE_ARGS, values, order=4, ds=False, ngb=False)
    assert "jpos_lo" not in args and "jacc" not in args and "nb_list" not in args
    assert layout.arg_index(layout.FORCE_ARGS, "eps2_d", 6, True, True) == 4
    assert "jjerk" not in layout.arg_names(layout.FORCE_ARGS, 6, True)
    assert layout.arg_names(layout.FORCE_ARGS, 8, True)[8:10] == ["jacc", "jjerk"]
    assert layout.arg_names(layout.PREDICT_ARGS, 8, False)[-2:] == ["acc", "jerk"]
    with pytest.raises(KeyError, match="jid"):
        layout.kernel_args(layout.FORCE_ARGS, {k: 0 for k in values if k != "jid"}, 4, True)
