"""Cases of the gemm11 round (issue 11, dense GEMM: forward and both backward products >= 0.95x
cuBLAS at every suite shape).

``gemm_shapes_sweep.py --set g11`` runs them in priority order (the budget cuts the end): first
the known misses with candidates (dB with long K over a small output, the 1024^3 products, N = 8
mod 16, the K > 4096 class, 256^3, 4095^3), then every backward product of the default suite
(``bench/operators/gemm.py``) against cuBLAS, then guards. Products of a layer C[M,N] = A[M,K]
B[K,N]: fwd (M x N x K, NN), grad_a dA = dC B^T (M x K x N, NT, tokens in M), grad_b dB = A^T dC
(K x N x M, TN, tokens in K). Variant syntax: ``gemm_shapes_sweep``'s docstring; ``sk:...,SPLIT,w``
is split-K with the K loop warp-specialized (``gemm_persistent.split_kernel`` ``WS``).
"""

from __future__ import annotations

AB = ["cublas", "auto"]
WIDE = "128,256,64"
TALL = "256,128,64"


def products(M, N, K, which="fwd,grad_a,grad_b"):
    """(group, M, N, K, layout, token_dim) of the products of the layer C[M,N] = A[M,K] B[K,N]."""
    out = {
        "fwd": ("fwd", M, N, K, "NN", "m"),
        "grad_a": ("grad_a", M, K, N, "NT", "m"),
        "grad_b": ("grad_b", K, N, M, "TN", "k"),
    }
    return [out[w] for w in which.split(",")]


def _with(prods, variants):
    return [(*p, list(variants)) for p in prods]


def g11_list():
    """(group, M, N, K, layout, token_dim, variants) in priority order."""
    one_k = ["tma:128,64,64,6,4,0,0", "tma:64,128,128,4,4,0,0", "sk:128,128,64,4,8,2,w"]
    cases = [
        # dB of a 1024 -> 1024 layer from 16384 tokens (rule: 4 splits of 128x256, 0.92x)
        (
            "grad_b",
            1024,
            1024,
            16384,
            "TN",
            "k",
            AB
            + [
                f"sk:{WIDE},3,8,4,w",
                f"sk:{WIDE},4,8,4",
                f"sk:{TALL},3,8,4",
                f"sk:{TALL},3,8,4,w",
                f"sk:{WIDE},3,8,2,w",
                "sk:128,128,64,4,8,2,w",
                "sk:64,256,64,4,4,2",
                "sk:64,256,64,4,4,2,w",
                f"sk:{WIDE},3,8,4",
            ],
        ),
        # 1024^3 (one wave of 64x128 tiles): dB 0.92x
        (
            "grad_b",
            1024,
            1024,
            1024,
            "TN",
            "k",
            AB
            + one_k
            + [
                "tma:64,128,64,4,4,0,0",
                "tma:128,128,64,4,8,0,0",
                "sk:128,128,64,4,8,2",
                "ptr:64,128,64,4,4",
            ],
        ),
        ("grad_a", 1024, 1024, 1024, "NT", "m", AB + one_k),
        ("fwd", 1024, 1024, 1024, "NN", "m", AB + one_k),
        # N = 8 mod 16 (rule: flattened 256x128, 4 stages, C in halves: 0.95-0.97x)
        (
            "fwd",
            4096,
            4104,
            4096,
            "NN",
            "m",
            AB
            + [
                f"p2:{TALL},4,8,fsw",
                "p2t:128,256,64,3,8,fw",
                "p2t:128,256,64,3,8,f",
                "p2:256,128,32,8,8,fs",
                f"p2:{WIDE},3,8,fw",
                f"p2:{TALL},3,8,fw",
            ],
        ),
        # its dA: K = 4104 is K class 8192, so the rule takes the non-flattened loop
        ("grad_a", 4096, 4096, 4104, "NT", "m", AB + [f"p2:{WIDE},3,8,fw", f"p2:{WIDE},4,8,fs"]),
        (
            "grad_b",
            4096,
            4104,
            4096,
            "TN",
            "k",
            AB + [f"p2:{TALL},4,8,fsw", "p2t:128,256,64,3,8,fw"],
        ),
        # K class 8192 (K > 4096): flattened + WS against the rule's plain persistent loop
        ("grad_a", 4096, 4096, 14336, "NT", "m", AB + [f"p2:{WIDE},3,8,fw"]),
        ("grad_b", 4096, 4096, 16384, "TN", "k", AB + [f"p2:{WIDE},3,8,fw"]),
        ("fwd", 4096, 4096, 4100, "NN", "m", AB + [f"pad:p2:{WIDE},3,8,fw"]),
        ("fwd", 8192, 8192, 8192, "NN", "m", AB + [f"p2:{WIDE},3,8,fw"]),
        # 256^3: 16 tiles of 64x64, 4 K steps (0.96x)
        (
            "fwd",
            256,
            256,
            256,
            "NN",
            "m",
            AB
            + [
                "ptr:32,64,64,4,4",
                "ptr:32,32,128,2,4",
                "tma:64,64,128,2,4,0,0",
                "sk:64,64,64,4,4,2",
                "tma:64,32,64,4,4,0,0",
            ],
        ),
        *_with(products(256, 256, 256, "grad_a,grad_b"), AB),
        # 4095^3 (pad path; torch.compile returns a padded view: padv)
        ("fwd", 4095, 4095, 4095, "NN", "m", AB + ["padv"]),
        *_with(products(4095, 4095, 4095, "grad_a,grad_b"), AB),
    ]
    # every other backward product of the default suite, against cuBLAS
    rest = [
        products(1, 4096, 4096, "grad_a,grad_b"),
        products(16, 4096, 4096, "grad_a,grad_b"),
        products(4096, 4096, 4096, "grad_a,grad_b"),
        products(4096, 14336, 4096, "grad_b"),
        products(16384, 4096, 4096, "grad_a"),
        products(16384, 1024, 1024, "grad_a"),
        products(4095, 4096, 4096, "grad_a,grad_b"),
        products(4096, 4096, 4100, "grad_a,grad_b"),
        products(64, 14336, 4096, "grad_a,grad_b"),
        products(127, 255, 65, "grad_a,grad_b"),
        products(4095, 4104, 4100),
        products(8192, 8192, 8192, "grad_a,grad_b"),
    ]
    for ps in rest:
        cases += _with(ps, AB)
    # forward products the split-K rule reaches (65-256 tokens, K class 8192, few output tiles)
    cases.append(("fwd", 128, 4096, 14336, "NN", "m", AB + ["tma:64,128,64,6,4,0,0"]))
    cases.append(("fwd", 256, 4096, 14336, "NN", "m", AB + ["tma:64,128,64,6,4,0,0"]))
    # forward guards of the default suite
    for M, N, K in [
        (4096, 4096, 4096),
        (16384, 1024, 1024),
        (64, 14336, 4096),
        (1, 4096, 4096),
        (16, 4096, 4096),
        (4096, 14336, 4096),
        (16384, 4096, 4096),
        (127, 255, 65),
    ]:
        extra = ["p2t:128,256,64,3,8,fw"] if (M, N, K) == (4096, 4096, 4096) else []
        cases.append(("fwd", M, N, K, "NN", "m", AB + extra))
    return cases


def g11b_list():
    """The gemm11b round (ran at 2e075f5: results/gemm11b-h200): the dispatch of that commit
    (``auto``: the "line" path for NT
    products whose operands both have rows off 128-byte lines, split-K reduced inside the split
    kernel) against cuBLAS and the old choice, candidates for what still missed, then every
    forward / backward product of the default and training suites as guards (127x255x65 left
    out: the sweep's graph capture fails for the autotuned pointer launch)."""
    old_split = f"sk:{WIDE},4,8"  # the gemm11 rule: two launches, 4 stages
    cases = [
        # dA of 4096x4104x4096: both operands' rows 8208 bytes (gemm11: 0.80x)
        (
            "grad_a",
            4096,
            4096,
            4104,
            "NT",
            "m",
            AB
            + [
                "tma:128,256,64,3,8,1,0",  # the old dispatch (K class 8192: WIDE)
                "pad128:a:auto",
                "pad128:ab:auto",
                f"pad128:b:p2:{WIDE},3,8,fw",
                f"pad128:b:p2:{TALL},4,8,fs",
                "ptr:128,256,64,3,8",
                "ptr:128,128,64,4,8",
                "tma:128,128,128,3,8,1,0",  # 256-byte box rows: fewer line crossings per byte
                "tma:128,256,128,2,8,1,0",
            ],
        ),
        # split-K: the reduction inside the split kernel (auto) against the second launch
        (
            "grad_b",
            1024,
            1024,
            16384,
            "TN",
            "k",
            AB
            + [
                f"{old_split},4",
                f"skf:{WIDE},3,8,4",
                "skf:128,128,64,4,8,2",
                "sk:128,128,64,4,8,2",
            ],
        ),
        (
            "fwd",
            128,
            4096,
            14336,
            "NN",
            "m",
            AB
            + [
                f"{old_split},8",
                f"sk:{WIDE},3,8,8",
                f"skf:{WIDE},4,8,4",
                "skf:128,128,64,4,8,4",
                "skf:128,128,128,3,8,4",
                "skp:128,128,64,4,8,4",
            ],
        ),
        (
            "fwd",
            256,
            4096,
            14336,
            "NN",
            "m",
            AB
            + [f"{old_split},4", f"sk:{WIDE},3,8,4", "skf:128,128,64,4,8,2", f"skf:{WIDE},4,8,2"],
        ),
        ("grad_b", 1024, 1024, 8192, "TN", "k", AB + [f"{old_split},4"]),
        # dB 1024^3 (0.948x): the rule's 64x128x128 4 deep against neighbours
        (
            "grad_b",
            1024,
            1024,
            1024,
            "TN",
            "k",
            AB
            + [
                "tma:64,128,128,3,4,0,0",
                "tma:128,64,128,4,4,0,0",
                "tma:64,128,64,8,4,0,0",
                "skf:128,128,64,4,8,2",
                "p2t:64,128,128,4,4",
            ],
        ),
        *_with(products(1024, 1024, 1024, "fwd,grad_a"), AB),
        # 256^3: 64x32 tiles now (measured forward only), the old 64x64, the pointer 32x64
        *_with(products(256, 256, 256), AB + ["tma:64,64,64,4,4,0,0", "ptr:32,64,64,4,4"]),
        *_with(products(4096, 4104, 4096, "fwd,grad_b"), AB),
    ]
    guards = [
        products(4096, 4096, 4096),
        products(16384, 1024, 1024),
        products(4095, 4104, 4100),
        products(16, 4096, 4096),
        products(1, 4096, 4096),
        products(64, 14336, 4096),
        products(4096, 14336, 4096),
        products(16384, 4096, 4096),
        products(4095, 4096, 4096),
        products(4096, 4096, 4100),
        products(4095, 4095, 4095),
        products(8192, 8192, 8192),
    ]
    for ps in guards:
        cases += _with(ps, AB)
    return cases
