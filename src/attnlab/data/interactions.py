"""Generated user–item interaction histories whose ground truth is known.

No package installable here ships interaction data for offline use (MovieLens, Amazon and the
like are downloads), so the recommendation experiment uses this generator. Its rule is stated in
full, so that which history item caused the next one is known and attention weights can be scored
against it.

The rule (``InteractionConfig``; items are 1 … ``num_items``, 0 is padding):

* the items fall into ``num_clusters`` clusters of equal size, item i in cluster
  ``(i − 1) // cluster_size``; inside a cluster the items are ordered in a ring;
* each user has 1–3 *interests* (clusters, drawn without replacement) and a history of
  ``min_len`` … ``max_len`` items;
* the first ``lag`` items are drawn uniformly from the user's interests;
* every later item x_t, with probability ``follow``, is the **successor** in its ring of the
  item ``lag`` steps back (x_t = next(x_{t−lag}): the *source* of x_t is t − lag); otherwise
  (probability 1 − ``follow``) it is a uniform item of a uniform interest (no source).

So the order matters: the next item's cluster is that of the item ``lag`` steps back (a model
that sees positions can know it exactly), while a bag of the history only tells the 1–3
interests. ``source[u][t]`` records the position that caused x_t (−1 where none did).

Same seed, same histories (one ``numpy.random.Generator``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class InteractionConfig:
    num_users: int = 2000
    num_items: int = 500
    num_clusters: int = 10
    min_len: int = 20
    max_len: int = 50
    lag: int = 3  # the next item follows the item this many steps back
    follow: float = 0.8  # probability that it does (else a random item of one of the user's interests)
    max_interests: int = 3

    def __post_init__(self) -> None:
        if self.num_items % self.num_clusters:
            raise ValueError(f"num_items must be a multiple of num_clusters; got {self.num_items} and {self.num_clusters}")
        if not 1 <= self.lag < self.min_len <= self.max_len:
            raise ValueError(f"need 1 ≤ lag < min_len ≤ max_len; got lag={self.lag}, min_len={self.min_len}, "
                             f"max_len={self.max_len}")
        if not 0.0 <= self.follow <= 1.0:
            raise ValueError(f"follow must be a probability in [0, 1]; got {self.follow}")

    @property
    def cluster_size(self) -> int:
        return self.num_items // self.num_clusters


@dataclass(frozen=True)
class Interactions:
    config: InteractionConfig
    histories: list[np.ndarray]  # per user: item ids (int64), 1 … num_items
    sources: list[np.ndarray]  # per user: the position that caused each item, −1 where none did
    interests: list[np.ndarray]  # per user: the clusters of interest

    def cluster(self, items: np.ndarray) -> np.ndarray:
        """The cluster of each item id (padding 0 gives −1)."""
        return np.where(items > 0, (items - 1) // self.config.cluster_size, -1)


def successor(cfg: InteractionConfig, item: int) -> int:
    """The next item in ``item``'s cluster ring."""
    c, j = divmod(item - 1, cfg.cluster_size)
    return 1 + c * cfg.cluster_size + (j + 1) % cfg.cluster_size


def _user(cfg: InteractionConfig, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    interests = rng.choice(cfg.num_clusters, size=int(rng.integers(1, cfg.max_interests + 1)), replace=False)
    n = int(rng.integers(cfg.min_len, cfg.max_len + 1))
    items, source = np.zeros(n, dtype=np.int64), np.full(n, -1, dtype=np.int64)
    for t in range(n):
        if t >= cfg.lag and rng.random() < cfg.follow:
            items[t], source[t] = successor(cfg, int(items[t - cfg.lag])), t - cfg.lag
        else:
            items[t] = 1 + int(rng.choice(interests)) * cfg.cluster_size + int(rng.integers(cfg.cluster_size))
    return items, source, interests


def generate(cfg: InteractionConfig = InteractionConfig(), seed: int = 0) -> Interactions:
    """``cfg.num_users`` histories drawn by the rule of the module docstring."""
    rng = np.random.default_rng(seed)
    users = [_user(cfg, rng) for _ in range(cfg.num_users)]
    return Interactions(cfg, [u[0] for u in users], [u[1] for u in users], [u[2] for u in users])


__all__ = ["InteractionConfig", "Interactions", "generate", "successor"]
