"""Ranker tags: read from the class through the registry, never from the ranker's name."""

from __future__ import annotations

import pytest

from ltrr._errors import ConfigError
from ltrr.rankers import BaseRanker, RankerTags, ranker_tags, rankers

TEXT_RANKERS = {"transformer-pointwise", "transformer-pairwise", "transformer-listwise"}
TORCH_RANKERS = TEXT_RANKERS | {"ffn-pointwise", "ffn-pairwise", "listnet-listwise"}


@pytest.mark.parametrize("name", sorted(rankers))
def test_every_registered_ranker_has_its_tags(name):
    klass = rankers.get(name)
    tags = ranker_tags(name)
    assert isinstance(tags, RankerTags)
    # the class declares the same tags, and name, class and instance agree
    assert ranker_tags(klass) == ranker_tags(klass()) == tags
    assert tags.needs_text is (name in TEXT_RANKERS)
    assert tags.torch_based is (name in TORCH_RANKERS)
    # the class tag agrees with sklearn's instance tag for the default parameters
    assert tags.allows_nan is klass().__sklearn_tags__().input_tags.allow_nan
    assert tags.learns_missing <= tags.allows_nan


def test_transformer_rankers_say_they_need_text():
    for name in sorted(TEXT_RANKERS):
        assert ranker_tags(name).needs_text, name
    assert not any(ranker_tags(n).needs_text for n in rankers if n not in TEXT_RANKERS)


def test_a_new_ranker_is_tagged_by_its_class_not_its_name():
    class Reader(BaseRanker):
        name = "transformer-lookalike"
        needs_text = False
        allows_nan = True

    assert ranker_tags(Reader) == RankerTags(
        needs_text=False, allows_nan=True, learns_missing=False, torch_based=False
    )


def test_unknown_names_and_non_rankers_are_config_errors():
    with pytest.raises(ConfigError, match="no-such-ranker"):
        ranker_tags("no-such-ranker")
    with pytest.raises(ConfigError, match="ranker name, class or instance; got dict"):
        ranker_tags(dict)
