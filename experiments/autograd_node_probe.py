"""What a C++ autograd node would save on the eager autograd path (a probe, not used by the library).

Builds, with ``torch.utils.cpp_extension.load_inline``, a minimal C++ node for ``add``
(backward: the gradient to both inputs, as ``_eager.Add``/the registered op) and a function that
records it on a fresh output (``collect_next_edges`` + ``set_history``), then times, on CPU
tensors, per call: the allocation alone; the allocation recorded by the C++ node; the allocation
recorded by a ``torch.autograd.Function`` through the C++ ``_FunctionBase.apply`` (what
``_eager`` does: its forward returns the output it is handed in a list); and PyTorch's own
``torch.add`` with and without an input requiring grad. Each: min over 7 loops of 5,000 calls,
thread CPU time, garbage collection off; outputs dropped each call (their graphs freed), as in the
harness's host mode.

Usage: python experiments/autograd_node_probe.py [--build-dir DIR] [--out FILE.json]
The node's C++ API differs between torch versions (``std::shared_ptr<Node>`` in older ones,
``c10::intrusive_ptr<Node>`` in torch 2.13); the source picks the pointer type at compile time.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import tempfile
import time
import timeit

SOURCE = r"""
#include <torch/extension.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <type_traits>
using namespace torch::autograd;

struct WgAddBackward : public Node {
  variable_list apply(variable_list&& grads) override { return {grads[0], grads[0]}; }
  std::string name() const override { return "WgAddBackward"; }
};

template <class N> auto make_node() {
  if constexpr (std::is_base_of_v<c10::intrusive_ptr_target, N>) {
    return c10::make_intrusive<N>();
  } else {
    return std::make_shared<N>();
  }
}

at::Tensor record_add(at::Tensor out, const at::Tensor& x, const at::Tensor& y) {
  auto node = make_node<WgAddBackward>();
  node->set_next_edges(collect_next_edges(x, y));
  set_history(out, node);
  return out;
}
"""


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", default=None)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    import torch
    from torch.utils.cpp_extension import load_inline

    torch.set_num_threads(1)
    build = args.build_dir or tempfile.mkdtemp(prefix="wg_node_")
    os.makedirs(build, exist_ok=True)
    t0 = time.time()
    ext = load_inline("wg_add_node_probe", cpp_sources=SOURCE, functions=["record_add"],
                      build_directory=build, extra_cflags=["-O2"])  # fmt: skip
    build_s = time.time() - t0

    bf = torch.bfloat16
    x = torch.randn(4096).to(bf).requires_grad_()
    y = torch.randn(4096).to(bf)
    xp = x.detach()

    class Add(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b, out):
            return out[0]

        @staticmethod
        def backward(ctx, grad):
            return grad, grad, None

    apply = torch._C._FunctionBase.__dict__["apply"].__get__(None, Add)

    def empty():
        return torch.empty(4096, dtype=bf)

    def node():
        return ext.record_add(torch.empty(4096, dtype=bf), x, y)

    def function():
        return apply(x, y, [torch.empty(4096, dtype=bf)])

    g = torch.randn(4096).to(bf)
    for f in (node, function):  # both record the gradient to x (and y, which needs none)
        x.grad = None
        f().backward(g)
        assert torch.equal(x.grad, g), f
    items = {
        "allocation alone": empty,
        "allocation + C++ node": node,
        "allocation + Function (C++ _FunctionBase.apply)": function,
        "torch.add(x, y), no grad": lambda: torch.add(xp, y),
        "torch.add(x, y), x requires grad": lambda: torch.add(x, y),
    }
    res = {"torch": torch.__version__, "build_s": build_s}
    gc.disable()
    try:
        for name, fn in items.items():
            for _ in range(200):
                fn()
            res[name] = (
                min(timeit.repeat(fn, number=5000, repeat=7, timer=time.thread_time)) / 5000 * 1e6
            )
            print(f"  {res[name]:7.3f} us  {name}", flush=True)
    finally:
        gc.enable()
    print(f"  build {build_s:.1f} s (torch {torch.__version__})")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(res, fh, indent=1)
    return res


if __name__ == "__main__":
    main()
