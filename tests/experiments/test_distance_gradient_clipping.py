"""The distance experiment clips the gradient's norm at 1.0 before every Adam step.

Adam's first step does not depend on the gradient's scale, so the reference runs two steps: the second
batch's gradient (norm ≈ 10 with these sizes) is scaled by hand to norm 1 before torch's Adam applies it."""

from __future__ import annotations

import torch
from torch import nn

from attnlab.experiments.distance import DistanceConfig, build, make_batch, train_one


def test_two_steps_clip_the_gradient_norm_at_one():
    cfg = DistanceConfig(
        steps=2, batch_size=6, lr=1.0, hidden=16, classes=8, distractors=4, prefix=1, test_size=5
    )
    model, _ = train_one("gru", 2, 5, cfg)
    torch.manual_seed(5)
    ref = build("gru", cfg)
    opt = torch.optim.Adam(ref.parameters(), lr=1.0)
    g = torch.Generator().manual_seed(5)
    norms = []
    for _ in range(2):
        x, y = make_batch(cfg, 2, 6, g)
        loss = nn.functional.cross_entropy(ref(ref.emb(x)), y)
        opt.zero_grad()
        loss.backward()
        norm = float(torch.sqrt(sum((p.grad.double() ** 2).sum() for p in ref.parameters())))
        norms.append(norm)
        with torch.no_grad():
            for p in ref.parameters():
                p.grad.mul_(min(1.0, 1.0 / (norm + 1e-6)))
        opt.step()
    assert (
        norms[0] < 1.0 < 2.0 < norms[1]
    )  # the second step is clipped, by a factor of more than two
    for p, q in zip(ref.parameters(), model.parameters()):
        torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6)
