"""The manifold catalogue is the one list: exports, the CLI table, the README and the docs agree."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

import riemfl
import riemfl.manifolds as manifolds
from riemfl.manifolds.base import Manifold
from riemfl.manifolds.catalogue import FAMILIES, examples, markdown_table

ROOT = Path(__file__).resolve().parents[2]


def _concrete_subclasses(cls: type) -> set[type]:
    found = set()
    for sub in cls.__subclasses__():
        if sub.__module__.startswith("riemfl.manifolds.") and not inspect.isabstract(sub):
            found.add(sub)
        found |= _concrete_subclasses(sub)
    return found


def test_every_manifold_class_of_the_package_is_in_the_catalogue():
    assert {f.cls for f in FAMILIES} == _concrete_subclasses(Manifold)


def test_names_are_unique():
    names = [f.name for f in FAMILIES]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("module", [riemfl, manifolds], ids=["riemfl", "riemfl.manifolds"])
def test_packages_export_every_family(module):
    for family in FAMILIES:
        assert family.name in module.__all__, f"{module.__name__} does not export {family.name}"
        assert getattr(module, family.name) is family.cls


def test_every_family_has_an_example_of_its_class():
    for family in FAMILIES:
        assert family.examples, f"{family.name} has no example for `riemfl manifolds`"
        for make in family.examples:
            assert type(make()) is family.cls


def test_examples_follow_the_catalogue_order():
    classes = [type(m) for m in examples()]
    order = [f.cls for f in FAMILIES]
    assert classes == sorted(classes, key=order.index)


def test_signatures_name_their_class():
    for family in FAMILIES:
        assert family.signature.startswith(family.name + "(")


@pytest.mark.parametrize("document", ["README.md", "docs/manifolds.md"])
def test_documents_show_the_catalogue_table(document):
    text = (ROOT / document).read_text(encoding="utf-8")
    assert markdown_table() in text, (
        f"{document} does not show the catalogue's table; paste the output of "
        "`riemfl manifolds --markdown`"
    )


def test_table_has_one_row_per_family_and_three_cells_each():
    rows = markdown_table().splitlines()[2:]
    assert len(rows) == len(FAMILIES)
    for row in rows:
        cells = row.replace("\\|", "").strip("|").split("|")
        assert len(cells) == 3, row
