"""The walkthroughs of the modern mechanisms against float64 NumPy written here from the papers' equations.

softcap (Gemma 2), linear (Katharopoulos et al. 2020), differential (Ye et al. 2024), latent / MLA
(DeepSeek-V2), gqa (Ainslie et al. 2023) and 2-D neighbourhood attention (Hassani et al. 2023, NATTEN's
border rule). Each reference reads the example's own TOML numbers and never calls attnlab; it is
compared with the values the walkthrough shows (its JSON document, which every renderer prints, and
the printed text at 4 decimals). ``verify`` of each built-in example passes (every claim exact).
"""

from __future__ import annotations

import numpy as np
import pytest

import attnlab
from attnlab.cli import main
from attnlab.explain import MECHANISMS, document, load, render, run, verify
from attnlab.explain.mechanisms import canonical

NEW = ("softcap", "linear", "differential", "latent", "gqa", "neighborhood")


def _a(x) -> np.ndarray:
    return np.array(x, dtype=np.float64)


def _softmax(e: np.ndarray) -> np.ndarray:
    """Row softmax; −inf entries get 0."""
    z = np.exp(e - e.max(-1, keepdims=True))
    return z / z.sum(-1, keepdims=True)


def _shown(name: str) -> tuple[dict[str, np.ndarray], str]:
    """The walkthrough's steps (name → the values it shows) and its printed text."""
    ex = load(f"attnlab-{name}")
    t = run(ex)
    doc = document(ex, t)
    steps = {s["name"]: np.array(s["value"], dtype=np.float64) for s in doc["steps"]}
    return steps, render(ex, t)


def _printed(text: str, ref: np.ndarray) -> None:
    for x in ref.ravel():
        s = f"{x:.4f}"
        assert (s if s != "-0.0000" else "0.0000") in text, s


def softcap_ref(p):
    q, k, v, c = _a(p["inputs"]["query"]), _a(p["inputs"]["keys"]), _a(p["inputs"]["values"]), float(p["params"]["cap"])
    e = q @ k.T / np.sqrt(q.shape[1])
    capped = c * np.tanh(e / c)  # Gemma 2: soft-capping before the softmax
    a = _softmax(capped)
    return {"scaled_scores": e, "softcapped_scores": capped, "weights": a, "context": a @ v}


def linear_ref(p):
    q, k, v = _a(p["inputs"]["query"]), _a(p["inputs"]["keys"]), _a(p["inputs"]["values"])
    phi = lambda x: np.where(x > 0, x + 1.0, np.exp(x))  # noqa: E731  elu(x) + 1
    out, sims, ws = [], [], []
    for i in range(len(q)):  # eqs. 18–20: S_i = Σ_{j≤i} φ(k_j) v_jᵀ, z_i = Σ_{j≤i} φ(k_j)
        s_i = sum(np.outer(phi(k[j]), v[j]) for j in range(i + 1))
        z_i = sum(phi(k[j]) for j in range(i + 1))
        out.append(phi(q[i]) @ s_i / (phi(q[i]) @ z_i))
        sims.append([phi(q[i]) @ phi(k[j]) if j <= i else 0.0 for j in range(len(k))])
        ws.append(np.array(sims[-1]) / (phi(q[i]) @ z_i))
    return {"query_features": phi(q), "key_features": phi(k), "similarities": _a(sims), "weights": _a(ws),
            "context": _a(out)}


def differential_ref(p):
    i, lam = p["inputs"], float(p["params"]["lambda"])
    maps = [_softmax(_a(i[f"query_{n}"]) @ _a(i[f"keys_{n}"]).T / np.sqrt(len(i["query_1"][0]))) for n in (1, 2)]
    w = maps[0] - lam * maps[1]  # eq. 1: (softmax(Q_1K_1ᵀ/√d) − λ softmax(Q_2K_2ᵀ/√d)) V
    return {"weights_1": maps[0], "weights_2": maps[1], "weights": w, "context": w @ _a(i["values"])}


def latent_ref(p):
    i, h = p["inputs"], p["params"]["num_heads"]
    qc, qr, c, kr = _a(i["query"]), _a(i["query_rope"]), _a(i["latents"]), _a(i["key_rope"])
    kc_all, v_all = c @ _a(p["params"]["w_uk"]).T, c @ _a(p["params"]["w_uv"]).T  # eqs. 10–11
    n, dh, dr, dv = len(c), qc.shape[1] // h, qr.shape[1] // h, v_all.shape[1] // h
    causal = np.tril(np.ones((len(qc), n), dtype=bool))
    ws, ctx, kcs = [], [], []
    for head in range(h):
        q = np.concatenate([qc[:, head * dh:(head + 1) * dh], qr[:, head * dr:(head + 1) * dr]], 1)  # eq. 16
        kc = kc_all[:, head * dh:(head + 1) * dh]
        k = np.concatenate([kc, kr], 1)  # eq. 17: one rotary key k^R for every head
        e = np.where(causal, q @ k.T / np.sqrt(dh + dr), -np.inf)
        a = _softmax(e)
        ws.append(a), ctx.append(a @ v_all[:, head * dv:(head + 1) * dv]), kcs.append(kc)  # eq. 18
    return {"content_keys": _a(kcs), "weights": _a(ws), "context": _a(ctx)}


def gqa_ref(p):
    x, pr = _a(p["inputs"]["x"]), p["params"]
    h, hkv = pr["num_heads"], pr["num_kv_heads"]
    q, k, v = x, x @ _a(pr["w_k"]).T, x @ _a(pr["w_v"]).T  # W_q absent: the identity
    d = k.shape[1] // hkv
    heads, ws = [], []
    for head in range(h):
        g = head // (h // hkv)  # the key/value head of query head `head`
        a = _softmax(q[:, head * d:(head + 1) * d] @ k[:, g * d:(g + 1) * d].T / np.sqrt(d))
        ws.append(a), heads.append(a @ v[:, g * d:(g + 1) * d])
    cat = np.concatenate(heads, 1)
    return {"weights": _a(ws), "heads": cat, "output": cat @ _a(pr["w_o"]).T}


def _window(i: int, size: int, kernel: int) -> range:
    """NATTEN: the kernel-wide window centred on i, shifted inside at the borders (the whole axis if smaller)."""
    if kernel >= size:
        return range(size)
    start = min(max(i - kernel // 2, 0), size - kernel)
    return range(start, start + kernel)


def neighborhood_ref(p):
    i, pr = p["inputs"], p["params"]
    hgt, wid, kernel = pr["height"], pr["width"], pr["kernel"]
    q, k, v = _a(i["query"]), _a(i["keys"]), _a(i["values"])
    allowed = np.zeros((hgt * wid, hgt * wid), dtype=bool)
    for a in range(hgt * wid):
        for b in range(hgt * wid):
            allowed[a, b] = b // wid in _window(a // wid, hgt, kernel) and b % wid in _window(a % wid, wid, kernel)
    e = q @ k.T / np.sqrt(q.shape[1])
    w = _softmax(np.where(allowed, e, -np.inf))
    return {"masked_scores": np.where(allowed, e, -np.inf), "weights": w, "context": w @ v}


REFS = {"softcap": softcap_ref, "linear": linear_ref, "differential": differential_ref, "latent": latent_ref,
        "gqa": gqa_ref, "neighborhood": neighborhood_ref}


@pytest.mark.parametrize("name", NEW)
def test_walkthrough_values_against_numpy(name):
    ex = load(f"attnlab-{name}")
    ref = REFS[name]({"inputs": ex.inputs, "params": ex.params})
    shown, text = _shown(name)
    for step, want in ref.items():
        np.testing.assert_allclose(shown[step], want, rtol=0, atol=1e-12, err_msg=f"{name}: {step}")
        _printed(text, want[np.isfinite(want)])


def test_the_references_are_not_trivial():
    """The examples show what each mechanism is for (checked on the references, not the library)."""
    load_ref = lambda n: REFS[n]({"inputs": load(f"attnlab-{n}").inputs, "params": load(f"attnlab-{n}").params})  # noqa: E731
    r = load_ref("softcap")
    assert r["scaled_scores"].max() > 4 and r["softcapped_scores"].max() < 1  # the cap acts
    r = load_ref("differential")
    np.testing.assert_allclose(r["weights"].sum(-1), 1 - 0.5)  # rows sum to 1 − λ
    r = load_ref("neighborhood")
    assert np.isinf(r["masked_scores"]).sum() == 16  # each of 8 tokens sees 6 of 8
    r = load_ref("gqa")
    assert not np.allclose(r["weights"][0], r["weights"][1])  # the query heads differ, the keys are shared


@pytest.mark.parametrize("name", NEW)
def test_verify_passes(name, capsys):
    assert canonical(name) in MECHANISMS
    ex = load(f"attnlab-{name}")
    verdicts = verify(ex)
    assert len(verdicts) >= 3 and all(v.status == "exact" for v in verdicts), [(v.where(), v.status) for v in verdicts]
    assert main(["verify", f"attnlab-{name}"]) == 0
    assert main(["explain", name, "--lang", "zh"]) == 0
    assert "第 1 步" in capsys.readouterr().out


@pytest.mark.parametrize("registered", ["softcap", "linear", "differential", "mla", "gqa", "neighborhood-2d"])
def test_registry_names_reach_the_walkthroughs(registered, capsys):
    """``attnlab explain NAME`` takes the attnlab.nn registry's names too."""
    assert registered in attnlab.available()
    assert main(["explain", registered]) == 0
    assert f"mechanism: {canonical(registered)}" in capsys.readouterr().out
    assert canonical(registered) in {canonical(n) for n in NEW}


@pytest.mark.parametrize("name", NEW)
def test_the_viewer_reads_each_walkthrough(name):
    """``attnlab view --example`` works on each (grouped-query: a query head's keys are its key group)."""
    from attnlab.viz import from_example

    ex = load(f"attnlab-{name}")
    assert from_example(ex, run(ex)) is not None
