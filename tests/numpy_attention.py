"""Independent numpy computations of attention, for the tests: row softmax, PAPA's normalised constant
(norm(X·P)), and one layer of every encoder family recomputed head by head from the stock weights
(reference_layer), with the hook that captures a layer's inputs (capture_layer).

Plain per-row loops in float64, written from each family's definition, not from papa's code.
"""

import math

import numpy as np

from papa.families import attention_modules
from tiny_encoders import HIDDEN, H

D_HEAD = HIDDEN // H


def softmax_rows(scores, allowed):
    """Row softmax over allowed keys; a row with none allowed is uniform (stock eager behaviour)."""
    out = np.zeros_like(scores)
    for i in range(scores.shape[0]):
        if not allowed[i].any():
            out[i] = 1.0 / scores.shape[1]
            continue
        row = np.where(allowed[i], scores[i], -np.inf)
        e = np.exp(row - row.max())
        out[i] = e / e.sum()
    return out


def numpy_norm(x, valid, band=None):
    """norm(X·P), P = m mᵀ (⊙ band), by a plain per-row loop."""
    pattern = np.outer(valid, valid) * (1.0 if band is None else band)
    x = np.asarray(x, dtype=np.float64) * pattern
    out = np.zeros_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] / max(np.abs(x[i]).sum(), 1e-12)
    return out


def np_(t):
    return t.detach().double().numpy().copy()


def log_bucket(r, bucket_size, max_position):
    """DeBERTa-v2's log-bucketed relative position, from its definition (sign-symmetric)."""
    mid = bucket_size // 2
    if abs(r) <= mid:
        return r
    return int(np.sign(r) * (math.ceil(math.log(abs(r) / mid) / math.log((max_position - 1) / mid) * (mid - 1)) + mid))


def reference_layer(name, stock_attention, x, valid, captured):
    """Stock probabilities (H, T, T), values (T, H, d) and the allowed-key band of one example's layer."""
    a = stock_attention
    n = x.shape[0]
    allowed = np.outer(np.ones(n), valid) > 0  # keys that may be attended
    band = None
    if name.startswith("deberta"):
        allowed = np.outer(valid, valid) > 0
    if name in ("bert", "roberta", "xlm-roberta", "camembert", "electra"):
        q = x @ np_(a.query.weight).T + np_(a.query.bias)
        k = x @ np_(a.key.weight).T + np_(a.key.bias)
        v = x @ np_(a.value.weight).T + np_(a.value.bias)
        scores = [q[:, h * D_HEAD:(h + 1) * D_HEAD] @ k[:, h * D_HEAD:(h + 1) * D_HEAD].T / math.sqrt(D_HEAD)
                  for h in range(H)]
    elif name == "modernbert":
        w = np_(a.Wqkv.weight)
        qkv = x @ w.T + (np_(a.Wqkv.bias) if a.Wqkv.bias is not None else 0)
        q, k, v = qkv[:, :HIDDEN], qkv[:, HIDDEN:2 * HIDDEN], qkv[:, 2 * HIDDEN:]
        cos, sin = (np_(t)[0] for t in captured["position_embeddings"])  # (T, d)

        def rotate(z):  # rotary embedding of one head's (T, d) block
            half = z.shape[1] // 2
            return z * cos + np.concatenate([-z[:, half:], z[:, :half]], axis=1) * sin

        scores = []
        for h in range(H):
            sl = slice(h * D_HEAD, (h + 1) * D_HEAD)
            scores.append(rotate(q[:, sl]) @ rotate(k[:, sl]).T / math.sqrt(D_HEAD))
        if a.sliding_window is not None:
            window = a.config.sliding_window
            band = (np.abs(np.arange(n)[:, None] - np.arange(n)[None, :]) <= window).astype(float)
            allowed = allowed & (band > 0)
    elif name == "deberta":
        w = np_(a.in_proj.weight)
        rows = lambda h, part: slice(h * 3 * D_HEAD + part * D_HEAD, h * 3 * D_HEAD + (part + 1) * D_HEAD)
        sf = 1 + len(a.pos_att_type)
        s = math.sqrt(D_HEAD * sf)
        span = min(n, a.max_relative_positions)
        rel = np_(captured["rel_embeddings"])[a.max_relative_positions - span:a.max_relative_positions + span]
        delta = np.clip(np.arange(n)[:, None] - np.arange(n)[None, :] + span, 0, 2 * span - 1)
        v = np.concatenate([x @ w[rows(h, 2)].T for h in range(H)], axis=1) + np_(a.v_bias)
        scores = []
        for h in range(H):
            sl = slice(h * D_HEAD, (h + 1) * D_HEAD)
            q = (x @ w[rows(h, 0)].T + np_(a.q_bias)[sl]) / s
            k = x @ w[rows(h, 1)].T
            pos_k = rel @ np_(a.pos_proj.weight)[sl].T
            pos_q = (rel @ np_(a.pos_q_proj.weight)[sl].T + np_(a.pos_q_proj.bias)[sl]) / s
            c2p = np.einsum("id,ijd->ij", q, pos_k[delta])
            p2c = np.einsum("jd,ijd->ij", k, pos_q[delta])
            scores.append(q @ k.T + c2p + p2c)
    else:  # deberta-v2
        lin = lambda m: (x @ np_(m.weight).T + np_(m.bias))
        q, k, v = lin(a.query_proj), lin(a.key_proj), lin(a.value_proj)
        sf = 1 + len(a.pos_att_type)
        s = math.sqrt(D_HEAD * sf)
        rel = np_(captured["rel_embeddings"])
        buckets, max_pos = a.position_buckets, a.max_relative_positions
        r = np.array([[i - j if buckets <= 0 else log_bucket(i - j, buckets, max_pos) for j in range(n)]
                      for i in range(n)])
        span = a.pos_ebd_size
        rel = rel[:2 * span]
        pk_mod, pq_mod = (a.key_proj, a.query_proj) if a.share_att_key else (a.pos_key_proj, a.pos_query_proj)
        pos_k = rel @ np_(pk_mod.weight).T + np_(pk_mod.bias)
        pos_q = rel @ np_(pq_mod.weight).T + np_(pq_mod.bias)
        c2p_index = np.clip(r + span, 0, 2 * span - 1)
        p2c_index = np.clip(-r.T + span, 0, 2 * span - 1)  # [i, j] = clamp(-r[j, i] + span)
        scores = []
        for h in range(H):
            sl = slice(h * D_HEAD, (h + 1) * D_HEAD)
            c2p = np.einsum("id,ijd->ij", q[:, sl], pos_k[:, sl][c2p_index])
            p2c = np.einsum("jd,ijd->ij", k[:, sl], pos_q[:, sl][p2c_index])
            scores.append((q[:, sl] @ k[:, sl].T + c2p + p2c) / s)
    probs = np.stack([softmax_rows(sc, allowed) for sc in scores])  # (H, T, T)
    return probs, v.reshape(n, H, D_HEAD), band


def capture_layer(model, layer_index):
    """Records the inputs and outputs of one self-attention module's forward."""
    module = attention_modules(model)[layer_index]
    captured = {}

    def hook(mod, args, kwargs, output):
        captured["x"] = args[0] if args else kwargs["hidden_states"]  # decoder layers pass it by name
        captured["output"] = output
        captured.update({k: v for k, v in kwargs.items() if k in ("position_embeddings", "rel_embeddings")})

    module.register_forward_hook(hook, with_kwargs=True)
    return captured
