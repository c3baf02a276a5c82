"""The generated interaction histories follow their stated rule, and one seed gives one data set."""

from __future__ import annotations

import numpy as np
import pytest

from attnlab.data.interactions import InteractionConfig, generate, successor


def test_every_item_with_a_source_is_the_successor_of_the_item_lag_steps_back():
    cfg = InteractionConfig(num_users=50, num_items=60, num_clusters=6, min_len=10, max_len=15, lag=2, follow=0.7)
    data = generate(cfg, seed=3)
    followed = total = 0
    for h, src, interests in zip(data.histories, data.sources, data.interests):
        assert 10 <= len(h) <= 15 and 1 <= len(interests) <= 3
        assert ((h >= 1) & (h <= 60)).all()
        for t, s in enumerate(src):
            total += t >= 2
            if s >= 0:
                followed += 1
                assert s == t - 2 and h[t] == successor(cfg, int(h[s]))
            else:  # a fresh item: one of the user's interests
                assert data.cluster(h[t:t + 1])[0] in interests
    assert 0.6 < followed / total < 0.8  # follow = 0.7


def test_successor_walks_a_ring_inside_the_cluster():
    cfg = InteractionConfig(num_items=20, num_clusters=4, min_len=5, max_len=6)  # clusters of 5: 1–5, 6–10, ...
    assert [successor(cfg, i) for i in (1, 4, 5, 6, 10)] == [2, 5, 1, 7, 6]


def test_one_seed_one_data_set():
    cfg = InteractionConfig(num_users=20)
    a, b, c = generate(cfg, seed=1), generate(cfg, seed=1), generate(cfg, seed=2)
    assert all(np.array_equal(x, y) for x, y in zip(a.histories, b.histories))
    assert not all(len(x) == len(y) and np.array_equal(x, y) for x, y in zip(a.histories, c.histories))


@pytest.mark.parametrize("kw", [{"num_items": 55}, {"lag": 20}, {"follow": 1.5}])
def test_bad_configs_say_what_is_wrong(kw):
    with pytest.raises(ValueError, match="got"):
        InteractionConfig(**kw)
