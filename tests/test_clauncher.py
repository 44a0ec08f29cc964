"""warpgauge's C launcher (``kernels/_clauncher``) on the CPU: type codes from real Triton
signatures, the per-version trailing scratch arguments, the spec layout, the argument packing
(the C extension's ``pack`` against the Python reference, which is itself checked against
hand-computed bytes), its error messages, the fallbacks and the ``_launch`` routing. The launch
itself needs a GPU: ``scripts/clauncher_check.py`` checks it bitwise on the H200."""

from __future__ import annotations

import ctypes.util
import shutil
import struct

import pytest
import torch

from warpgauge.kernels import _clauncher as cl
from warpgauge.kernels import _launch

HAS_CC = shutil.which("gcc") is not None or shutil.which("clang") is not None
HAS_LIBCUDA = ctypes.util.find_library("cuda") is not None


def _q(v):  # one 8-byte parameter slot
    return struct.pack("<Q", v)


# --------------------------------------------------------------------------- type codes


def test_type_codes_every_scalar_type():
    sig = ["*bf16", "*fp32", "*i8", "constexpr", "i1", "i8", "i16", "i32", "i64",
           "u1", "u8", "u16", "u32", "u64", "fp16", "bf16", "fp32", "f32", "fp64"]  # fmt: skip
    assert cl.type_codes(sig) == "pppcbbhilBBHILegffd"


@pytest.mark.parametrize(
    "ty", [("*fp16", "i32"), "tensordesc<bf16[16, 16]>", "nvTmaDesc", "fp8e4nv", "i128"]
)
def test_type_codes_refuse_what_the_launcher_does_not_pack(ty):
    with pytest.raises(cl.Unsupported, match="argument 1"):
        cl.type_codes(["*fp16", ty])


def test_type_codes_refuse_too_many_parameters():
    cl.type_codes(["i32"] * (cl.MAX_PARAMS - 2) + ["constexpr"] * 10)  # constexprs are free
    with pytest.raises(cl.Unsupported, match="parameters"):
        cl.type_codes(["i32"] * (cl.MAX_PARAMS - 1))


def test_type_codes_of_a_real_binder_specialization():
    """Triton's own binder (the one ``JITFunction.run`` uses) for sm_90: an int equal to 1 and a
    constexpr are ``constexpr`` (not passed), a bool is ``u1``, a big int ``i64``."""
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDABackend
    from triton.runtime.jit import JITFunction, create_function_from_signature

    def kernel(x_ptr, y_ptr, n, one, big, scale, flag, BLOCK: tl.constexpr):
        pass

    fn = JITFunction(kernel)
    binder = create_function_from_signature(
        fn.signature, fn.params, CUDABackend(GPUTarget("cuda", 90, 32))
    )
    x, y = torch.randn(64).to(torch.bfloat16), torch.randn(64)
    bound, spec, _ = binder(x, y, 17, 1, 2**40, 0.5, True, BLOCK=128)
    codes = cl.type_codes([s[0] for s in spec])
    assert codes == "ppiclfBc"
    got = cl.pack_reference(codes, list(bound.values()), 2)
    want = (_q(x.data_ptr()) + _q(y.data_ptr()) + _q(17) + _q(2**40)
            + struct.pack("<f", 0.5) + bytes(4) + _q(1) + bytes(16))  # fmt: skip
    assert got == want


def test_type_codes_match_triton_36_generated_launcher():
    """Against the launcher Triton 3.6 generates (the GPU machine's Triton; skipped elsewhere):
    the same parameters in the same order, constexprs dropped, the two scratch pointers last,
    and each argument parsed with the format our code stands for."""
    import re

    nv = pytest.importorskip("triton.backends.nvidia.driver")
    if getattr(nv, "_BASE_ARGS_FORMAT", None) != "iiiKKppOOOOOO" or not hasattr(
        nv, "make_launcher"
    ):
        pytest.skip("not Triton 3.6's generated launcher (this Triton has another)")
    types = ["*bf16", "constexpr", "i32", "i64", "fp32", "u1", "fp16", "bf16", "fp64", "i8",
             "i16", "u8", "u16", "u32", "u64", "*i8", "i1", "constexpr"]  # fmt: skip
    src = nv.make_launcher({}, dict(enumerate(types)), None)
    fmt = re.search(r'PyArg_ParseTuple\(args, "([^"]+)"', src).group(1)
    params = re.search(r"void \*params\[\] = \{ ([^}]*) \}", src).group(1)
    codes = cl.type_codes(types)
    # PyArg format -> the code(s) it stands for: O = pointer or constexpr, d = any float
    fmt_of = {"p": "O", "c": "O", "i": "i", "l": "L", "b": "b", "h": "h",
              "B": "B", "H": "H", "I": "I", "L": "K", "e": "d", "g": "d", "f": "d", "d": "d"}  # fmt: skip
    assert fmt == nv._BASE_ARGS_FORMAT + "".join(fmt_of[c] for c in codes)
    passed = [f"&arg{i}" for i, c in enumerate(codes) if c != "c"]
    assert params.split(", ") == passed + ["&global_scratch", "&profile_scratch"]
    assert cl.trailing_pointers(__import__("triton").__version__) == 2


# --------------------------------------------------------------------------- versions, spec


@pytest.mark.parametrize("version", ["3.6.0", "3.6.1+git1234", "3.9.0"])
def test_trailing_pointers_of_checked_versions(version):
    # Triton 3.6 (driver.py make_launcher) and 3.9 (driver.c) both append &global_scratch and
    # &profile_scratch after the kernel's arguments
    assert cl.trailing_pointers(version) == 2


@pytest.mark.parametrize("version", ["3.5.1", "3.7.0", "3.10.0", "4.0.0", "main", ""])
def test_trailing_pointers_refuse_unchecked_versions(version):
    with pytest.raises(cl.Unsupported, match="Triton"):
        cl.trailing_pointers(version)


def test_spec_layout():
    s = cl.spec_bytes(0xDEADBEEF12, 8, 2, 49152, True, False, "pci", 2, "softmax_kernel")
    head = cl._HEADER.unpack_from(s)
    assert head == (0xDEADBEEF12, 256, 49152, 2, cl.FLAG_COOP | cl.FLAG_GIL, 3, 2)
    assert s[cl._HEADER.size :] == b"pcisoftmax_kernel\0"
    s = cl.spec_bytes(1, 4, 1, 0, False, True, "", 0, "k", release_gil=False)
    assert cl._HEADER.unpack_from(s)[4] == cl.FLAG_PDL


@pytest.mark.parametrize(
    "bad", [dict(num_warps=0), dict(num_warps=64), dict(num_ctas=0), dict(shared=-1)]
)
def test_spec_refuses_impossible_settings(bad):
    kw = dict(function=1, num_warps=4, num_ctas=1, shared=0, coop=False, pdl=False, codes="p",
              trailing=2, name="k") | bad  # fmt: skip
    with pytest.raises(cl.Unsupported, match="launch settings"):
        cl.spec_bytes(**kw)


# --------------------------------------------------------------------------- packing reference


class _Ptr:
    def __init__(self, p):
        self.p = p

    def data_ptr(self):
        return self.p


def test_pack_reference_by_hand():
    """Each code against bytes written out by hand (Triton 3.6's launcher rules)."""
    codes = "pppcbhilBHILfgedp"
    args = [0x7F0012345600, None, _Ptr(0xABC0), "ignored", -2, -300, -5, -(2**40),
            True, 70000, 2**33 + 7, 2**64 - 1, 1.1, 1.1, 1.5, -2.25, 16]  # fmt: skip
    want = b"".join(
        [
            _q(0x7F0012345600), _q(0), _q(0xABC0),  # pointers; the constexpr is skipped
            b"\xfe" + bytes(7), struct.pack("<h", -300) + bytes(6),
            struct.pack("<i", -5) + bytes(4), struct.pack("<q", -(2**40)),
            _q(1), _q(70000 % 2**16), _q(7), _q(2**64 - 1),  # unsigned: masked
            bytes.fromhex("cdcc8c3f") + bytes(4),  # fp32 1.1 = 0x3F8CCCCD
            bytes.fromhex("8c3f") + bytes(6),  # bf16: the fp32's upper half (truncated)
            bytes.fromhex("003e") + bytes(6),  # fp16 1.5 = 0x3E00
            bytes.fromhex("00000000000002c0"),  # fp64 -2.25
            _q(16), bytes(16),  # two trailing null scratch pointers
        ]
    )  # fmt: skip
    assert cl.pack_reference(codes, args, 2) == want


def test_pack_reference_errors():
    with pytest.raises(OverflowError, match="argument 0"):
        cl.pack_reference("i", [2**31], 0)
    with pytest.raises(OverflowError, match="argument 1"):
        cl.pack_reference("pb", [0, 256], 0)
    with pytest.raises(OverflowError, match="argument 0"):
        cl.pack_reference("b", [-129], 0)
    # an i8 takes Triton 3.6's 0..255 (PyArg 'b') and 3.9's -128..127: the same byte
    assert cl.pack_reference("bb", [200, -56], 0) == (b"\xc8" + bytes(7)) * 2
    with pytest.raises(TypeError, match="argument 0"):
        cl.pack_reference("i", [1.5], 0)
    with pytest.raises(TypeError, match="2 arguments"):
        cl.pack_reference("ii", [1], 0)


# --------------------------------------------------------------------------- the C extension


@pytest.fixture(scope="module")
def mod():
    if not HAS_CC:
        pytest.skip("no C compiler (gcc/clang): the C launcher cannot be built here")
    m = cl.module()
    assert m is not None, cl.build_error()
    return m


def test_c_source_compiles_with_bundled_cuda_h(mod):
    import os

    assert os.path.exists(os.path.join(cl.include_dir(), "cuda.h"))
    assert callable(mod.launch) and callable(mod.pack) and mod.launches() >= 0


def test_c_pack_matches_reference_by_hand(mod):
    codes = "pppcbhilBHILfgedp"
    args = [0x7F0012345600, None, _Ptr(0xABC0), "ignored", -2, -300, -5, -(2**40),
            True, 70000, 2**33 + 7, 2**64 - 1, 1.1, 1.1, 1.5, -2.25, 16]  # fmt: skip
    for trailing in (0, 2):
        spec = cl.spec_bytes(1, 4, 1, 0, False, False, codes, trailing, "k")
        assert mod.pack(spec, *args) == cl.pack_reference(codes, args, trailing)


def test_c_pack_matches_reference_random():
    hyp = pytest.importorskip("hypothesis")
    st = hyp.strategies
    if not HAS_CC:
        pytest.skip("no C compiler")
    m = cl.module()
    bounds = {"b": 7, "h": 15, "i": 31, "l": 63}

    def value(c):
        if c == "p":
            return st.one_of(st.none(), st.integers(0, 2**64 - 1))
        if c == "b":
            return st.integers(-128, 255)
        if c in bounds:
            return st.integers(-(2 ** bounds[c]), 2 ** bounds[c] - 1)
        if c in "BHIL":
            return st.integers(0, 2**64 - 1) | st.booleans()
        if c == "c":
            return st.just(None)
        if c == "e":  # within fp16's range (beyond it PyFloat_Pack2 raises: tested below)
            return st.floats(-65504, 65504, allow_nan=False)
        return st.floats(allow_nan=True, allow_infinity=True)

    args_st = st.lists(st.sampled_from("pcbhilBHILfged"), min_size=0, max_size=20).flatmap(
        lambda cs: st.tuples(st.just("".join(cs)), st.tuples(*[value(c) for c in cs]))
    )

    @hyp.settings(max_examples=300, deadline=None, database=None)
    @hyp.given(args_st)
    def check(case):
        codes, args = case
        spec = cl.spec_bytes(1, 4, 1, 0, False, False, codes, 2, "k")
        got = m.pack(spec, *args)
        want = cl.pack_reference(codes, list(args), 2)
        if got != want:  # NaN payloads: compare the slots as floats where both are NaN
            raise AssertionError((codes, args, got.hex(), want.hex()))

    check()


@pytest.mark.parametrize(
    "codes,args,exc,cause",
    [
        ("i", [2**31], "int32", OverflowError),
        ("b", [-129], "int8", OverflowError),
        ("b", [256], "int8", OverflowError),
        ("l", [2**63], "int64", OverflowError),
        ("i", [1.0], "int32", TypeError),
        ("f", ["x"], "float", TypeError),
        ("e", [1e6], "fp16", OverflowError),
        ("I", [1.0], "an int", None),
    ],
)
def test_c_pack_errors_name_kernel_and_argument(mod, codes, args, exc, cause):
    spec = cl.spec_bytes(1, 4, 1, 0, False, False, "p" + codes, 2, "my_kernel")
    with pytest.raises(TypeError, match=f"kernel 'my_kernel' argument 1: expected.*{exc}") as e:
        mod.pack(spec, 0, *args)
    if cause is not None:
        assert isinstance(e.value.__cause__, cause)


def test_c_pack_pointer_errors(mod):
    spec = cl.spec_bytes(1, 4, 1, 0, False, False, "p", 2, "my_kernel")
    with pytest.raises(TypeError, match="argument 0: a pointer argument must be an int"):
        mod.pack(spec, "not a pointer")
    with pytest.raises(TypeError, match="argument 0: a pointer must be an unsigned") as e:
        mod.pack(spec, -1)
    assert isinstance(e.value.__cause__, OverflowError)


def test_c_launch_argument_errors_before_the_driver(mod):
    spec = cl.spec_bytes(1, 4, 1, 0, False, False, "pi", 2, "my_kernel")
    with pytest.raises(TypeError, match="kernel 'my_kernel' takes 2 arguments, got 1"):
        mod.launch(1, 1, 1, 0, spec, 0)
    with pytest.raises(TypeError, match="spec"):
        mod.launch(1, 1, 1, 0, b"short", 0, 1)
    with pytest.raises(TypeError, match="spec"):
        mod.launch(1, 1, 1, 0, bytearray(spec), 0, 1)
    with pytest.raises(ValueError, match="malformed"):
        mod.launch(1, 1, 1, 0, spec[: cl._HEADER.size + 1], 0, 1)
    with pytest.raises(TypeError, match="grid"):
        mod.launch(1.0, 1, 1, 0, spec, 0, 1)
    with pytest.raises(TypeError, match=r"launch\(gridX"):
        mod.launch(1, 1, 1)


def test_time_launches_argument_errors(mod):
    spec = cl.spec_bytes(1, 4, 1, 0, False, False, "pi", 2, "my_kernel")
    with pytest.raises(ValueError, match="n must be"):
        mod.time_launches(0, 1, 1, 1, 0, spec, 0, 1)
    with pytest.raises(TypeError, match="do not match"):
        mod.time_launches(5, 1, 1, 1, 0, spec, 0)
    coop = cl.spec_bytes(1, 4, 1, 0, True, False, "pi", 2, "my_kernel")
    with pytest.raises(TypeError, match="launch attributes"):
        mod.time_launches(5, 1, 1, 1, 0, coop, 0, 1)


@pytest.mark.skipif(HAS_LIBCUDA, reason="libcuda present: a launch would reach the driver")
def test_c_launch_without_libcuda_raises_clearly(mod):
    spec = cl.spec_bytes(1, 4, 1, 0, False, False, "pi", 2, "my_kernel")
    with pytest.raises(RuntimeError, match="cannot open libcuda.so.1"):
        mod.launch(1, 1, 1, 0, spec, 0, 1)


# --------------------------------------------------------------------------- fallbacks, routing


class CudaLauncher:  # the name for_compiled recognises; the rest as Triton 3.6's
    def __init__(self, **kw):
        self.global_scratch_size = 0
        self.profile_scratch_size = 0
        self.launch_cooperative_grid = False
        self.launch_pdl = False
        self.__dict__.update(kw)

    def __call__(self, *args):
        raise AssertionError("Triton's launcher should not run here")


class _Src:
    def __init__(self, signature):
        self.signature = signature


class _Meta:
    tensordesc_meta = None


class FakeCompiled:
    def __init__(self, signature=None, packed=(4, 1, 1024), function=0x5000, run=None):
        self.name = "fake_kernel"
        self.src = _Src(signature or {"x": "*bf16", "n": "i32", "BLOCK": "constexpr"})
        self.metadata = _Meta()
        self.packed_metadata = packed
        self.function = function
        self.run = run or CudaLauncher()


def test_for_compiled_builds_the_spec(mod):
    fake = FakeCompiled()
    fast, head = cl.for_compiled(fake, fake.run)
    assert fast is mod.launch and len(head) == 1
    assert cl._HEADER.unpack_from(head[0]) == (0x5000, 128, 1024, 1, cl.FLAG_GIL, 3, 2)
    assert head[0].endswith(b"pic" + b"fake_kernel\0")


@pytest.mark.parametrize(
    "change,reason",
    [
        (dict(run=CudaLauncher(global_scratch_size=64)), "global_scratch_size"),
        (dict(run=CudaLauncher(profile_scratch_size=8)), "profile_scratch_size"),
        (dict(run=CudaLauncher(gsan_enabled=True)), "GSan"),
        (dict(run=lambda *a: None), "not Triton's CudaLauncher"),
        (dict(signature={"d": "tensordesc<bf16[16, 16]>"}), "tensordesc"),
        (dict(packed=("packed", 1)), "packed metadata"),
        (dict(function=0), "not loaded"),
    ],
)
def test_for_compiled_falls_back(mod, change, reason):
    fake = FakeCompiled(**change)
    cl.FALLBACKS.pop("fake_kernel", None)
    assert cl.for_compiled(fake, fake.run) is None
    assert reason in cl.FALLBACKS["fake_kernel"]


def test_for_compiled_falls_back_on_unchecked_triton(mod, monkeypatch):
    import triton

    monkeypatch.setattr(triton, "__version__", "3.7.0")
    fake = FakeCompiled()
    assert cl.for_compiled(fake, fake.run) is None
    assert "trailing arguments are not known" in cl.FALLBACKS["fake_kernel"]


def test_build_failure_falls_back(tmp_path, monkeypatch):
    if not HAS_CC:
        pytest.skip("no C compiler")
    broken = tmp_path / "broken.c"
    broken.write_text('#error "a broken launcher"\n')
    monkeypatch.setattr(cl, "SOURCE", broken)
    monkeypatch.setattr(cl, "_STATE", {})
    assert cl.module() is None
    assert "CalledProcessError" in cl.build_error()
    fake = FakeCompiled()
    assert cl.for_compiled(fake, fake.run) is None
    assert "not built" in cl.FALLBACKS["fake_kernel"]
    entry = _launch._Entry(fake)  # the cached launch keeps Triton's launcher
    assert entry.fast is not None and not isinstance(entry.head[0], bytes)


def test_launch_entry_routes_by_flag(mod, monkeypatch):
    fake = FakeCompiled()
    monkeypatch.setattr(_launch, "C_LAUNCH", True)
    entry = _launch._Entry(fake)
    assert entry.fast is mod.launch and isinstance(entry.head[0], bytes)
    monkeypatch.setattr(_launch, "C_LAUNCH", False)
    entry = _launch._Entry(fake)
    assert entry.fast is not mod.launch and not isinstance(entry.head[0], bytes)
