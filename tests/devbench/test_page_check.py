"""tools/devbench/page_check.py: the generated page's sensor sizes against the build."""
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "devbench"))

import page_check  # noqa: E402

PAGE = """intro

| build | flash | static RAM | max stack | RAM incl. stack |
|---|---:|---:|---:|---:|
| m4-rustcrypto | 76,896 B | 520 B | 12,940 B | 13,460 B |
| m0plus-rustcrypto | 89,068 B | 520 B | 13,260 B | 13,780 B |

after
"""


def write(tmp_path):
    p = tmp_path / "device-costs.md"
    p.write_text(PAGE)
    return str(p)


def test_the_table_is_read():
    assert page_check.sensor_table(PAGE) == {"m4-rustcrypto": (76896, 520), "m0plus-rustcrypto": (89068, 520)}


def test_sizes_as_on_the_page_pass(tmp_path):
    r = {"sensor": {"m4-rustcrypto": {"flash": 76896, "static_ram": 520}}}
    assert page_check.check(write(tmp_path), r) == []


def test_a_grown_image_or_a_missing_row_fails(tmp_path):
    p = write(tmp_path)
    grown = {"sensor": {"m4-rustcrypto": {"flash": 78156, "static_ram": 520}}}
    assert "run scripts/bench-device" in page_check.check(p, grown)[0]
    new = {"sensor": {"m4-new": {"flash": 1, "static_ram": 1}}}
    assert "no row" in page_check.check(p, new)[0]
    assert page_check.check(p, {"sensor": {}}) == ["no sensor image was measured"]
