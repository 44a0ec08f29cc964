"""Cases of the gemm-95 round (issue 11, GEMM part: >= 0.95x cuBLAS at every suite shape).

``gemm_shapes_sweep.py --set g95`` runs them: the weak shapes of run 20261201-104732-default
(forward and both backward products), then guard shapes that are good today. Each group lists
``cublas`` and ``auto`` (the dispatch at this commit) first, then candidates (variant syntax in
gemm_shapes_sweep's docstring; ``skp:`` is a skinny plan, ``padv:`` the pad path without the copy
of C back). Products: fwd C[M,N] = A[M,K] B[K,N]; grad_a dA[M,K] = dC[M,N] B^T (an M x K x N
product, layout NT); grad_b dB[K,N] = A^T dC (a K x N x M product, layout TN, tokens in K).
"""

from __future__ import annotations

AB = ["cublas", "auto"]
WIDE = "128,256,64"
TALL = "256,128,64"


def g95_list():
    """(group, M, N, K, layout, token_dim, variants) in priority order (the budget cuts the end)."""
    return [
        # 64 tokens x 14336 x 4096: skinny (split-K over B^T tiles); auto = 64,128,128 3 stages, 1
        (
            "fwd",
            64,
            14336,
            4096,
            "NN",
            "m",
            AB
            + [
                "skp:64,64,128,4,4,1",
                "skp:64,64,128,3,4,1",
                "skp:64,64,64,4,4,1",
                "skp:64,64,64,6,4,1",
                "skp:64,128,64,4,4,1",
                "skp:64,128,64,6,4,1",
                "skp:64,128,128,3,8,1",
                "skp:64,128,64,4,4,2",
                "skp:64,64,128,4,4,2",
                "skp:64,64,64,4,4,3",
                "tma:64,128,64,6,4,0,0",
                "tma:64,64,64,6,4,0,0",
            ],
        ),  # fmt: skip
        (
            "grad_a",
            64,
            4096,
            14336,
            "NT",
            "m",
            AB
            + [
                "skp:64,64,128,4,4,4",
                "skp:64,64,128,3,4,3",
                "skp:64,64,64,6,4,4",
                "skp:64,64,64,4,4,6",
                "skp:64,128,128,3,4,4",
                "skp:64,128,64,4,4,4",
            ],
        ),  # fmt: skip
        (
            "grad_b",
            4096,
            14336,
            64,
            "TN",
            "k",
            AB
            + [
                f"p2:{WIDE},4,8,fs",
                f"p2:{WIDE},3,8,f",
                f"tma:{WIDE},3,8,1,0",
                f"tma:{WIDE},3,8,0,0",
                "tma:128,128,64,4,8,0,0",
            ],
        ),  # fmt: skip
        # 1024^3 (one wave of 64x128 tiles; auto = tma 64,128,64, 6 stages, 4 warps)
        (
            "fwd",
            1024,
            1024,
            1024,
            "NN",
            "m",
            AB
            + [
                "tma:64,128,64,6,4,0,1",
                "tma:64,128,32,8,4,0,0",
                "tma:64,128,64,5,4,0,0",
                "tma:64,64,64,6,4,0,0",
                "tma:64,128,64,6,8,0,0",
                "tma:128,64,64,6,4,0,0",
                "tma:64,256,64,4,8,0,0",
                "ptr:64,128,64,6,4",
            ],
        ),  # fmt: skip
        ("grad_a", 1024, 1024, 1024, "NT", "m", AB + ["tma:64,64,64,6,4,0,0"]),
        ("grad_b", 1024, 1024, 1024, "TN", "k", AB + ["tma:64,64,64,6,4,0,0"]),
        # 16384x1024x1024 (auto = flattened 128x256 WS, 3 stages)
        (
            "fwd",
            16384,
            1024,
            1024,
            "NN",
            "m",
            AB
            + [
                f"p2:{WIDE},4,8,fs",
                f"p2:{WIDE},4,8,f",
                f"p2:{WIDE},3,8,fs",
                f"p2:{TALL},4,8,fs",
            ],
        ),  # fmt: skip
        ("grad_a", 16384, 1024, 1024, "NT", "m", AB + [f"p2:{WIDE},4,8,fs"]),
        # dB of it: 1024x1024 output, K = 16384 tokens (auto = 64x128 tiles, one wave, long K)
        (
            "grad_b",
            1024,
            1024,
            16384,
            "TN",
            "k",
            AB
            + [
                f"sk:{WIDE},3,8,4",
                "sk:128,128,64,4,8,2",
                "sk:128,128,64,4,8,4",
                "tma:128,128,64,4,8,0,0",
                f"tma:{WIDE},3,8,0,0",
                "p2:128,128,64,4,8,f",
            ],
        ),  # fmt: skip
        # N = 4104 (auto = flattened 256x128, 4 stages, C in halves)
        (
            "fwd",
            4096,
            4104,
            4096,
            "NN",
            "m",
            AB
            + [
                "p2:128,128,64,4,8,f",
                "p2:128,128,64,4,8,fw",
                "p2:128,128,64,5,8,fs",
                f"p2:{TALL},3,8,fw",
                f"p2:{TALL},4,8,f",
                f"p2:{TALL},3,8,fs",
            ],
        ),  # fmt: skip
        ("fwd", 4095, 4104, 4100, "NN", "m", AB),
        ("grad_a", 4095, 4100, 4104, "NT", "m", AB),
        ("grad_b", 4100, 4104, 4095, "TN", "k", AB),
        # all odd: pad path (auto); padv = the same without copying C back
        (
            "fwd",
            4095,
            4095,
            4095,
            "NN",
            "m",
            AB
            + [
                "padv",
            ],
        ),  # fmt: skip
        # tiny: pointer kernel; BLOCK_K = 128 makes K = 65 one masked step
        (
            "fwd",
            127,
            255,
            65,
            "NN",
            "m",
            [
                "cublas",
                "ptr:32,64,64,4,4",
                "ptr:32,64,128,2,4",
                "ptr:32,64,128,1,4",
                "ptr:64,64,128,2,4",
                "ptr:32,32,128,2,4",
                "ptr:32,64,32,4,4",
                "ptr:32,64,128,2,2",
                "ptr:16,64,128,2,4",
                "auto",
            ],
        ),  # fmt: skip
        (
            "grad_a",
            127,
            65,
            255,
            "NT",
            "m",
            ["cublas", "ptr:32,64,64,4,4", "ptr:32,64,128,2,4", "ptr:32,32,64,3,4", "auto"],
        ),  # fmt: skip
        (
            "grad_b",
            65,
            255,
            127,
            "TN",
            "k",
            ["cublas", "ptr:32,64,64,4,4", "ptr:32,64,128,2,4", "ptr:32,32,128,2,4", "auto"],
        ),  # fmt: skip
        # guards (good today)
        ("fwd", 4096, 4096, 4096, "NN", "m", AB + [f"p2:{WIDE},4,8,fs"]),
        ("fwd", 4096, 14336, 4096, "NN", "m", AB + [f"p2:{WIDE},4,8,fs"]),
        ("fwd", 1, 4096, 4096, "NN", "m", AB),
        ("fwd", 16, 4096, 4096, "NN", "m", AB),
        ("fwd", 8192, 8192, 8192, "NN", "m", AB),
        ("fwd", 256, 256, 256, "NN", "m", AB),
    ]


def g95b_list():
    """Round 2: the dispatch after round 1 (``auto``) where its rules changed, the old choice
    side by side (``skp:64,128,128,3,4,1`` = the old 33-64 token plan for wide N,
    ``tma:64,128,64,6,4,0,0`` = the old choice for few tiles with long K), and candidates for the
    1024^3 backward products that still miss 0.95x."""
    old_skinny = "skp:64,128,128,3,4,1"
    narrow = "tma:64,128,64,6,4,0,0"
    return [
        ("fwd", 64, 14336, 4096, "NN", "m", AB + [old_skinny, narrow]),
        ("fwd", 48, 14336, 4096, "NN", "m", AB + [old_skinny]),
        ("grad_a", 64, 4096, 14336, "NT", "m", AB),
        (
            "grad_b",
            1024,
            1024,
            16384,
            "TN",
            "k",
            AB
            + [
                narrow,
                f"sk:{WIDE},4,8,4",
                f"sk:{TALL},3,8,4",
                f"sk:{WIDE},3,8,2",
            ],
        ),  # fmt: skip
        ("fwd", 128, 4096, 14336, "NN", "m", AB + [narrow]),  # also newly split (8 ways)
        (
            "grad_b",
            1024,
            1024,
            1024,
            "TN",
            "k",
            AB
            + [
                "tma:128,64,64,6,4,0,0",
                "tma:64,128,64,4,4,0,0",
                "tma:64,128,128,4,4,0,0",
                "tma:128,128,64,4,8,0,0",
                "tma:64,64,64,4,4,0,0",
                "tma:64,128,64,6,8,0,0",
                "ptr:64,128,64,4,4",
                "sk:128,128,64,4,8,2",
            ],
        ),  # fmt: skip
        (
            "grad_a",
            1024,
            1024,
            1024,
            "NT",
            "m",
            AB
            + [
                "tma:128,64,64,6,4,0,0",
                "tma:64,128,64,4,4,0,0",
                "tma:64,128,128,4,4,0,0",
            ],
        ),  # fmt: skip
        ("fwd", 1024, 1024, 1024, "NN", "m", AB),
        ("fwd", 127, 255, 65, "NN", "m", ["cublas", "auto", "ptr:32,32,128,2,4"]),
        ("grad_a", 127, 65, 255, "NT", "m", ["cublas", "auto", "ptr:32,32,64,3,4"]),
        ("grad_b", 65, 255, 127, "TN", "k", ["cublas", "auto", "ptr:32,32,128,2,4"]),
        ("fwd", 16384, 1024, 1024, "NN", "m", AB),
        ("grad_a", 16384, 1024, 1024, "NT", "m", AB),
        ("fwd", 1, 4096, 4096, "NN", "m", AB),
        ("fwd", 16, 4096, 4096, "NN", "m", AB),
        ("fwd", 4096, 4096, 4096, "NN", "m", AB),
        ("fwd", 256, 256, 256, "NN", "m", AB),
    ]
