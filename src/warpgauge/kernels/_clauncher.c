/* warpgauge's lean kernel launcher (see _clauncher.py).
 *
 * launch(gridX, gridY, gridZ, stream, spec, *args): one METH_FASTCALL entry for every compiled
 * kernel. ``spec`` (bytes, built once per compiled kernel by _clauncher.spec_bytes) holds the
 * CUfunction handle, block size, shared memory, cluster size, launch flags, one type code per
 * kernel argument and the number of trailing scratch pointers Triton's launcher appends; the
 * arguments are packed by those codes exactly as Triton's generated launcher packs them, and the
 * kernel is launched with cuLaunchKernel (cuLaunchKernelEx only for what needs attributes:
 * clusters, cooperative grids, PDL). libcuda is opened with dlopen on first launch, so the module
 * builds and loads on a machine without a GPU (its packing is tested there through pack()).
 *
 * Type codes: 'c' constexpr (not passed), 'p' pointer (int, None or an object with data_ptr()),
 * 'b' i8/i1, 'h' i16, 'i' i32, 'l' i64, 'B' u8, 'H' u16, 'I' u32, 'L' u64,
 * 'e' fp16, 'g' bf16, 'f' fp32, 'd' fp64.
 */
#include "cuda.h"
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define WG_MAX_PARAMS 128
#define WG_FLAG_COOP 1u
#define WG_FLAG_PDL 2u
#define WG_FLAG_GIL 4u /* release the GIL around the launch (as Triton does) */

typedef struct {
  uint64_t function;
  uint32_t block_x;
  uint32_t shared;
  uint32_t num_ctas;
  uint32_t flags;
  uint32_t nargs;    /* Python arguments after spec (constexprs included) */
  uint32_t trailing; /* null pointers appended after the arguments (Triton's scratch) */
  /* then: nargs type codes, then the kernel's name, NUL-terminated */
} WgSpec;

typedef CUresult (*launch_t)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, CUstream, void **, void **);
typedef CUresult (*launch_ex_t)(const CUlaunchConfig *, CUfunction, void **, void **);
typedef CUresult (*ctx_get_t)(CUcontext *);
typedef CUresult (*ctx_set_t)(CUcontext);
typedef CUresult (*dev_get_t)(CUdevice *, int);
typedef CUresult (*retain_t)(CUcontext *, CUdevice);
typedef CUresult (*err_t)(CUresult, const char **);
typedef CUresult (*ptr_attr_t)(void *, CUpointer_attribute, CUdeviceptr);
typedef CUresult (*func_attr_t)(CUfunction, CUfunction_attribute, int);

static struct {
  int loaded;
  launch_t launch;
  launch_ex_t launch_ex;
  ctx_get_t ctx_get;
  ctx_set_t ctx_set;
  dev_get_t dev_get;
  retain_t retain;
  err_t err_name;
  err_t err_string;
  ptr_attr_t ptr_attr;
  func_attr_t func_attr;
} cu;

static unsigned long long n_launches = 0;
static PyObject *data_ptr_str = NULL;

static int load_cuda(void) {
  if (cu.loaded)
    return 0;
  void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (!h) {
    PyErr_Format(PyExc_RuntimeError, "warpgauge C launcher: cannot open libcuda.so.1 (%s)",
                 dlerror());
    return -1;
  }
#define WG_SYM(field, type, name)                                                                \
  cu.field = (type)dlsym(h, name);                                                               \
  if (!cu.field) {                                                                               \
    PyErr_SetString(PyExc_RuntimeError, "warpgauge C launcher: libcuda.so.1 lacks " name);      \
    return -1;                                                                                   \
  }
  WG_SYM(launch, launch_t, "cuLaunchKernel")
  WG_SYM(launch_ex, launch_ex_t, "cuLaunchKernelEx")
  WG_SYM(ctx_get, ctx_get_t, "cuCtxGetCurrent")
  WG_SYM(ctx_set, ctx_set_t, "cuCtxSetCurrent")
  WG_SYM(dev_get, dev_get_t, "cuDeviceGet")
  WG_SYM(retain, retain_t, "cuDevicePrimaryCtxRetain")
  WG_SYM(err_name, err_t, "cuGetErrorName")
  WG_SYM(err_string, err_t, "cuGetErrorString")
  WG_SYM(ptr_attr, ptr_attr_t, "cuPointerGetAttribute")
  WG_SYM(func_attr, func_attr_t, "cuFuncSetAttribute")
#undef WG_SYM
  cu.loaded = 1;
  return 0;
}

static PyObject *cuda_error(CUresult code, const char *what, const char *kernel) {
  const char *name = NULL, *text = NULL;
  if (cu.err_name)
    cu.err_name(code, &name);
  if (cu.err_string)
    cu.err_string(code, &text);
  PyErr_Format(PyExc_RuntimeError,
               "warpgauge C launcher: %s of kernel '%s' failed: %s (%d): %s "
               "(set WARPGAUGE_C_LAUNCH=0 to launch through Triton's launcher instead)",
               what, kernel, name ? name : "?", (int)code, text ? text : "unknown CUDA error");
  return NULL;
}

/* Triton's ensureCudaContext: a thread without a current context gets device 0's primary one. */
static int ensure_context(const char *kernel) {
  CUcontext ctx = NULL;
  CUresult r = cu.ctx_get(&ctx);
  if (r != CUDA_SUCCESS) {
    cuda_error(r, "cuCtxGetCurrent before the launch", kernel);
    return -1;
  }
  if (!ctx) {
    CUdevice dev;
    if ((r = cu.dev_get(&dev, 0)) != CUDA_SUCCESS || (r = cu.retain(&ctx, dev)) != CUDA_SUCCESS ||
        (r = cu.ctx_set(ctx)) != CUDA_SUCCESS) {
      cuda_error(r, "making device 0's primary context current", kernel);
      return -1;
    }
  }
  return 0;
}

static int spec_of(PyObject *obj, const WgSpec **spec, const char **codes, const char **name) {
  if (!PyBytes_CheckExact(obj) || PyBytes_GET_SIZE(obj) < (Py_ssize_t)sizeof(WgSpec)) {
    PyErr_SetString(PyExc_TypeError,
                    "warpgauge C launcher: argument 5 (spec) must be the bytes built by "
                    "_clauncher.spec_bytes");
    return -1;
  }
  const WgSpec *s = (const WgSpec *)PyBytes_AS_STRING(obj);
  if (PyBytes_GET_SIZE(obj) < (Py_ssize_t)(sizeof(WgSpec) + s->nargs + 1) ||
      s->nargs + s->trailing > WG_MAX_PARAMS) {
    PyErr_SetString(PyExc_ValueError, "warpgauge C launcher: malformed spec");
    return -1;
  }
  *spec = s;
  *codes = PyBytes_AS_STRING(obj) + sizeof(WgSpec);
  *name = *codes + s->nargs;
  return 0;
}

static int arg_error(const char *kernel, Py_ssize_t i, const char *what) {
  /* the conversion's own exception (OverflowError, TypeError) becomes the cause */
#if PY_VERSION_HEX >= 0x030C0000
  PyObject *cause = PyErr_GetRaisedException();
  PyErr_Format(PyExc_TypeError, "warpgauge C launcher: kernel '%s' argument %zd: %s", kernel, i,
               what);
  if (cause) {
    PyObject *now = PyErr_GetRaisedException();
    PyException_SetCause(now, cause); /* steals cause */
    PyErr_SetRaisedException(now);
  }
#else
  PyObject *t = NULL, *v = NULL, *tb = NULL;
  PyErr_Fetch(&t, &v, &tb);
  if (t)
    PyErr_NormalizeException(&t, &v, &tb);
  PyErr_Format(PyExc_TypeError, "warpgauge C launcher: kernel '%s' argument %zd: %s", kernel, i,
               what);
  if (v) {
    PyObject *t2, *v2, *tb2;
    PyErr_Fetch(&t2, &v2, &tb2);
    PyErr_NormalizeException(&t2, &v2, &tb2);
    PyException_SetCause(v2, v); /* steals v */
    PyErr_Restore(t2, v2, tb2);
  }
  Py_XDECREF(t);
  Py_XDECREF(tb);
#endif
  return -1;
}

static int signed_arg(PyObject *o, int64_t lo, int64_t hi, int64_t *out) {
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
  if (v == -1 && PyErr_Occurred())
    return -1;
  if (overflow || v < lo || v > hi) {
    PyErr_SetString(PyExc_OverflowError, "integer out of range for the argument's type");
    return -1;
  }
  *out = v;
  return 0;
}

static int pointer_arg(PyObject *o, uint64_t *out, int check, Py_ssize_t i, const char *kernel) {
  if (PyLong_Check(o)) {
    *out = PyLong_AsUnsignedLongLong(o);
    if (*out == (uint64_t)-1 && PyErr_Occurred())
      return arg_error(kernel, i, "a pointer must be an unsigned 64-bit int");
    return 0;
  }
  if (o == Py_None) {
    *out = 0;
    return 0;
  }
  PyObject *r = PyObject_CallMethodNoArgs(o, data_ptr_str);
  if (!r || !PyLong_Check(r)) {
    Py_XDECREF(r);
    return arg_error(kernel, i, "a pointer argument must be an int, None or have data_ptr()");
  }
  *out = PyLong_AsUnsignedLongLong(r);
  Py_DECREF(r);
  if (*out == (uint64_t)-1 && PyErr_Occurred())
    return -1;
  if (check && *out) { /* as Triton: an object's pointer must be device-accessible */
    uint64_t dev = 0;
    CUresult st = cu.ptr_attr(&dev, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, *out);
    if (st == CUDA_ERROR_INVALID_VALUE) {
      PyErr_Format(PyExc_ValueError,
                   "warpgauge C launcher: kernel '%s' argument %zd cannot be accessed from the "
                   "GPU (a CPU tensor?): pass a CUDA tensor",
                   kernel, i);
      return -1;
    }
    if (st != CUDA_SUCCESS) {
      cuda_error(st, "cuPointerGetAttribute", kernel);
      return -1;
    }
    *out = dev;
  }
  return 0;
}

/* Pack args by codes into storage / params; returns the number of params or -1. */
static int pack(const WgSpec *s, const char *codes, const char *kernel, PyObject *const *args,
                uint64_t *storage, void **params, int check) {
  int n = 0;
  for (uint32_t i = 0; i < s->nargs; i++) {
    PyObject *o = args[i];
    char c = codes[i];
    if (c == 'c')
      continue;
    void *slot = &storage[n];
    storage[n] = 0;
    int64_t v;
    switch (c) {
    case 'p':
      if (pointer_arg(o, (uint64_t *)slot, check, i, kernel))
        return -1;
      break;
    case 'b': /* Triton 3.6 parses i8/i1 with PyArg's 'b' (0..255); 3.9 takes -128..127 */
      if (signed_arg(o, INT8_MIN, UINT8_MAX, &v))
        return arg_error(kernel, i, "expected an int8 value (-128..255)");
      *(uint8_t *)slot = (uint8_t)v;
      break;
    case 'h':
      if (signed_arg(o, INT16_MIN, INT16_MAX, &v))
        return arg_error(kernel, i, "expected an int16 value");
      *(int16_t *)slot = (int16_t)v;
      break;
    case 'i':
      if (signed_arg(o, INT32_MIN, INT32_MAX, &v))
        return arg_error(kernel, i, "expected an int32 value");
      *(int32_t *)slot = (int32_t)v;
      break;
    case 'l':
      if (signed_arg(o, INT64_MIN, INT64_MAX, &v))
        return arg_error(kernel, i, "expected an int64 value");
      *(int64_t *)slot = v;
      break;
    case 'B':
    case 'H':
    case 'I':
    case 'L': { /* as PyArg's B/H/I/K: no overflow check, the value is masked */
      if (!PyLong_Check(o))
        return arg_error(kernel, i, "expected an int");
      unsigned long long u = PyLong_AsUnsignedLongLongMask(o);
      if (u == (unsigned long long)-1 && PyErr_Occurred())
        return arg_error(kernel, i, "expected an int");
      if (c == 'B')
        *(uint8_t *)slot = (uint8_t)u;
      else if (c == 'H')
        *(uint16_t *)slot = (uint16_t)u;
      else if (c == 'I')
        *(uint32_t *)slot = (uint32_t)u;
      else
        *(uint64_t *)slot = (uint64_t)u;
      break;
    }
    case 'e':
    case 'g':
    case 'f':
    case 'd': {
      double d = PyFloat_AsDouble(o);
      if (d == -1.0 && PyErr_Occurred())
        return arg_error(kernel, i, "expected a float");
      if (c == 'd') {
        memcpy(slot, &d, 8);
      } else if (c == 'f') {
        float f = (float)d;
        memcpy(slot, &f, 4);
      } else if (c == 'g') { /* Triton's pack_bf16: truncation of the fp32 value */
        float f = (float)d;
        uint32_t u;
        memcpy(&u, &f, 4);
        *(uint16_t *)slot = (uint16_t)(u >> 16);
      } else {
        if (PyFloat_Pack2(d, (char *)slot, 1))
          return arg_error(kernel, i, "expected a float in fp16's range");
      }
      break;
    }
    default:
      PyErr_Format(PyExc_ValueError, "warpgauge C launcher: unknown type code '%c'", c);
      return -1;
    }
    params[n] = slot;
    n++;
  }
  for (uint32_t t = 0; t < s->trailing; t++) {
    storage[n] = 0;
    params[n] = &storage[n];
    n++;
  }
  return n;
}

static int grid_arg(PyObject *o, unsigned *out) {
  int64_t v;
  if (!PyLong_Check(o)) {
    PyErr_SetString(PyExc_TypeError, "warpgauge C launcher: grid sizes must be ints");
    return -1;
  }
  if (signed_arg(o, INT32_MIN, INT32_MAX, &v))
    return -1;
  *out = v < 0 ? 0 : (unsigned)v; /* Triton launches nothing for a grid of size <= 0 */
  return 0;
}

/* The driver call of one packed launch (grid already checked non-empty). */
static CUresult launch_packed(const WgSpec *s, unsigned gx, unsigned gy, unsigned gz,
                              uint64_t stream, void **params) {
  CUresult r;
  PyThreadState *ts = (s->flags & WG_FLAG_GIL) ? PyEval_SaveThread() : NULL;
  if (s->num_ctas == 1 && !(s->flags & (WG_FLAG_COOP | WG_FLAG_PDL))) {
    r = cu.launch((CUfunction)(uintptr_t)s->function, gx, gy, gz, s->block_x, 1, 1, s->shared,
                  (CUstream)(uintptr_t)stream, params, NULL);
  } else { /* the attributes Triton 3.6's launcher sets, in its order */
    CUlaunchAttribute attrs[4];
    unsigned na = 0;
    memset(attrs, 0, sizeof(attrs));
    if (s->flags & WG_FLAG_PDL) {
      attrs[na].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
      attrs[na++].value.programmaticStreamSerializationAllowed = 1;
    }
    if (s->flags & WG_FLAG_COOP) {
      attrs[na].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
      attrs[na++].value.cooperative = 1;
    }
    if (s->num_ctas != 1) {
      attrs[na].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
      attrs[na].value.clusterDim.x = s->num_ctas;
      attrs[na].value.clusterDim.y = 1;
      attrs[na++].value.clusterDim.z = 1;
      attrs[na].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE;
      attrs[na++].value.clusterSchedulingPolicyPreference = CU_CLUSTER_SCHEDULING_POLICY_SPREAD;
    }
    CUlaunchConfig cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.gridDimX = gx * s->num_ctas;
    cfg.gridDimY = gy;
    cfg.gridDimZ = gz;
    cfg.blockDimX = s->block_x;
    cfg.blockDimY = 1;
    cfg.blockDimZ = 1;
    cfg.sharedMemBytes = s->shared;
    cfg.hStream = (CUstream)(uintptr_t)stream;
    cfg.attrs = attrs;
    cfg.numAttrs = na;
    r = CUDA_SUCCESS;
    if (s->num_ctas == 16)
      r = cu.func_attr((CUfunction)(uintptr_t)s->function,
                       CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1);
    if (r == CUDA_SUCCESS)
      r = cu.launch_ex(&cfg, (CUfunction)(uintptr_t)s->function, params, NULL);
  }
  if (ts)
    PyEval_RestoreThread(ts);
  if (r == CUDA_SUCCESS)
    n_launches++;
  return r;
}

static PyObject *launch(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  const WgSpec *s;
  const char *codes, *kernel;
  if (nargs < 5) {
    PyErr_SetString(PyExc_TypeError, "launch(gridX, gridY, gridZ, stream, spec, *args)");
    return NULL;
  }
  if (spec_of(args[4], &s, &codes, &kernel))
    return NULL;
  if ((uint64_t)(nargs - 5) != s->nargs) {
    PyErr_Format(PyExc_TypeError, "warpgauge C launcher: kernel '%s' takes %u arguments, got %zd",
                 kernel, s->nargs, nargs - 5);
    return NULL;
  }
  unsigned gx, gy, gz;
  if (grid_arg(args[0], &gx) || grid_arg(args[1], &gy) || grid_arg(args[2], &gz))
    return NULL;
  uint64_t stream = PyLong_AsUnsignedLongLong(args[3]);
  if (stream == (uint64_t)-1 && PyErr_Occurred())
    return NULL;
  if (load_cuda() || ensure_context(kernel))
    return NULL;
  uint64_t storage[WG_MAX_PARAMS];
  void *params[WG_MAX_PARAMS];
  if (pack(s, codes, kernel, args + 5, storage, params, 1) < 0)
    return NULL;
  if ((uint64_t)gx * gy * gz == 0)
    Py_RETURN_NONE;
  CUresult r = launch_packed(s, gx, gy, gz, stream, params);
  if (r != CUDA_SUCCESS)
    return cuda_error(r, "cuLaunchKernel", kernel);
  Py_RETURN_NONE;
}

/* pack(spec, *args) -> bytes: the params the launch would pass, 8 bytes per param (little-endian
 * slots, upper bytes zero), pointers taken as given (no device check). For tests. */
static PyObject *pack_only(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  const WgSpec *s;
  const char *codes, *kernel;
  if (nargs < 1) {
    PyErr_SetString(PyExc_TypeError, "pack(spec, *args)");
    return NULL;
  }
  if (spec_of(args[0], &s, &codes, &kernel))
    return NULL;
  if ((uint64_t)(nargs - 1) != s->nargs) {
    PyErr_Format(PyExc_TypeError, "warpgauge C launcher: kernel '%s' takes %u arguments, got %zd",
                 kernel, s->nargs, nargs - 1);
    return NULL;
  }
  uint64_t storage[WG_MAX_PARAMS];
  void *params[WG_MAX_PARAMS];
  int n = pack(s, codes, kernel, args + 1, storage, params, 0);
  if (n < 0)
    return NULL;
  return PyBytes_FromStringAndSize((const char *)storage, (Py_ssize_t)n * 8);
}

/* time_launches(n, gridX, gridY, gridZ, stream, spec, *args) -> tuple of n ints: the
 * nanoseconds of each of n back-to-back launches, timed around the driver call alone (args
 * packed once, GIL held). Separates the driver's own cost from the launcher's (diagnostics). */
static PyObject *time_launches(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  const WgSpec *s;
  const char *codes, *kernel;
  if (nargs < 6 || !PyLong_Check(args[0])) {
    PyErr_SetString(PyExc_TypeError, "time_launches(n, gridX, gridY, gridZ, stream, spec, *args)");
    return NULL;
  }
  Py_ssize_t n = PyLong_AsSsize_t(args[0]);
  if (n < 1 || n > 100000) {
    PyErr_SetString(PyExc_ValueError, "time_launches: n must be in 1..100000");
    return NULL;
  }
  if (spec_of(args[5], &s, &codes, &kernel))
    return NULL;
  if ((uint64_t)(nargs - 6) != s->nargs || s->num_ctas != 1 ||
      (s->flags & (WG_FLAG_COOP | WG_FLAG_PDL))) {
    PyErr_SetString(PyExc_TypeError, "time_launches: arguments do not match the spec, or the "
                                     "kernel needs launch attributes");
    return NULL;
  }
  unsigned gx, gy, gz;
  if (grid_arg(args[1], &gx) || grid_arg(args[2], &gy) || grid_arg(args[3], &gz))
    return NULL;
  uint64_t stream = PyLong_AsUnsignedLongLong(args[4]);
  if (stream == (uint64_t)-1 && PyErr_Occurred())
    return NULL;
  if (load_cuda() || ensure_context(kernel))
    return NULL;
  uint64_t storage[WG_MAX_PARAMS];
  void *params[WG_MAX_PARAMS];
  if (pack(s, codes, kernel, args + 6, storage, params, 1) < 0)
    return NULL;
  PyObject *out = PyTuple_New(n);
  if (!out)
    return NULL;
  for (Py_ssize_t k = 0; k < n; k++) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CUresult r = cu.launch((CUfunction)(uintptr_t)s->function, gx, gy, gz, s->block_x, 1, 1,
                           s->shared, (CUstream)(uintptr_t)stream, params, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (r != CUDA_SUCCESS) {
      Py_DECREF(out);
      return cuda_error(r, "cuLaunchKernel", kernel);
    }
    long long ns = (t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec);
    PyTuple_SET_ITEM(out, k, PyLong_FromLongLong(ns));
  }
  return out;
}

static PyObject *launches(PyObject *self, PyObject *unused) {
  return PyLong_FromUnsignedLongLong(n_launches);
}

/* ---------------------------------------------------------------------------------- Replay
 *
 * Replay(n_in, device, get_device, get_stream, stream, runtime, hooks, modes, slow, fast,
 *        launches, result, refused): a recorded call's replay (_replay._Recipe) in one C call,
 * called as replay(tensors, i0, ..., i<n_in-1>) with the inputs' data pointers, exactly like
 * the Python replay that _replay._generate builds (which stays the fallback). It returns
 * ``refused`` when the current device is not ``device`` (asked only when ``get_device`` is not
 * None), the current stream is not ``stream`` (a workspace's; when not None), a launch hook is
 * installed (runtime.launch_enter_hook / launch_exit_hook is not the recorded HookChain of
 * ``hooks``, or that chain has calls), or two inputs share a pointer. It allocates each output
 * through ``slow[j]`` when any of ``modes`` returns true (a dispatch or function mode,
 * deterministic algorithms), else through ``fast[j]``, refuses an allocation off a 16-byte
 * line, then launches each recorded kernel: its parameters were packed once, here, from the
 * recorded arguments (``template``: the bytes pack() gives for them), and each pointer slot is
 * filled per call from an input or an allocation.
 * launches: tuple of (spec, gx, gy, gz, template bytes, slot parameter indices, slot sources),
 *           a source being input i (< n_in) or allocation j (n_in + j);
 * result:   one source (an allocation), returned itself, or a tuple of sources (-1: None)
 *           returned as a tuple. */

typedef struct {
  PyObject *spec; /* bytes, kept alive: s points into it */
  const WgSpec *s;
  const char *name;
  unsigned gx, gy, gz;
  int nparams;
  uint64_t *storage; /* the nparams packed template parameters */
  int nslots;
  int *slot_param;
  int *slot_src;
} WgLaunch;

typedef struct {
  PyObject_HEAD vectorcallfunc vectorcall;
  int n_in, n_alloc, n_launch, n_result, tuple_result;
  PyObject *device;     /* int */
  PyObject *get_device; /* None: not asked (one CUDA device in the process) */
  PyObject *get_stream;
  PyObject *stream; /* None or the int handle a workspace serves */
  PyObject *runtime;
  PyObject *hooks; /* (enter HookChain, exit HookChain) */
  PyObject *modes; /* callables */
  PyObject *slow, *fast;
  PyObject *refused;
  PyObject *launches_obj; /* the constructor's launches (introspection) */
  WgLaunch *launches;
  int *result_src;
} WgReplay;

static PyObject *str_enter = NULL, *str_exit = NULL, *str_calls = NULL;

static void replay_dealloc(WgReplay *r) {
  Py_XDECREF(r->device);
  Py_XDECREF(r->get_device);
  Py_XDECREF(r->get_stream);
  Py_XDECREF(r->stream);
  Py_XDECREF(r->runtime);
  Py_XDECREF(r->hooks);
  Py_XDECREF(r->modes);
  Py_XDECREF(r->slow);
  Py_XDECREF(r->fast);
  Py_XDECREF(r->refused);
  Py_XDECREF(r->launches_obj);
  if (r->launches) {
    for (int k = 0; k < r->n_launch; k++) {
      Py_XDECREF(r->launches[k].spec);
      PyMem_Free(r->launches[k].storage);
      PyMem_Free(r->launches[k].slot_param);
      PyMem_Free(r->launches[k].slot_src);
    }
    PyMem_Free(r->launches);
  }
  PyMem_Free(r->result_src);
  Py_TYPE(r)->tp_free((PyObject *)r);
}

static int int_in(PyObject *o, long lo, long hi, int *out, const char *what) {
  long v = PyLong_AsLong(o);
  if (v == -1 && PyErr_Occurred())
    return -1;
  if (v < lo || v > hi) {
    PyErr_Format(PyExc_ValueError, "Replay: %s = %ld out of range [%ld, %ld]", what, v, lo, hi);
    return -1;
  }
  *out = (int)v;
  return 0;
}

static int replay_launch_init(WgLaunch *L, PyObject *item, int n_src) {
  if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 7) {
    PyErr_SetString(PyExc_TypeError, "Replay: a launch is (spec, gx, gy, gz, template, "
                                     "slot params, slot sources)");
    return -1;
  }
  const char *codes;
  PyObject *spec = PyTuple_GET_ITEM(item, 0);
  if (spec_of(spec, &L->s, &codes, &L->name))
    return -1;
  Py_INCREF(spec);
  L->spec = spec;
  if (grid_arg(PyTuple_GET_ITEM(item, 1), &L->gx) || grid_arg(PyTuple_GET_ITEM(item, 2), &L->gy) ||
      grid_arg(PyTuple_GET_ITEM(item, 3), &L->gz))
    return -1;
  PyObject *tpl = PyTuple_GET_ITEM(item, 4);
  int params = 0;
  for (uint32_t i = 0; i < L->s->nargs; i++)
    params += codes[i] != 'c';
  params += (int)L->s->trailing;
  if (!PyBytes_CheckExact(tpl) || PyBytes_GET_SIZE(tpl) != (Py_ssize_t)params * 8) {
    PyErr_Format(PyExc_ValueError, "Replay: kernel '%s' template must be %d bytes", L->name,
                 params * 8);
    return -1;
  }
  L->nparams = params;
  L->storage = PyMem_Calloc(params ? params : 1, sizeof(uint64_t));
  if (!L->storage)
    return (PyErr_NoMemory(), -1);
  memcpy(L->storage, PyBytes_AS_STRING(tpl), (size_t)params * 8);
  PyObject *sp = PyTuple_GET_ITEM(item, 5), *ss = PyTuple_GET_ITEM(item, 6);
  if (!PyTuple_Check(sp) || !PyTuple_Check(ss) || PyTuple_GET_SIZE(sp) != PyTuple_GET_SIZE(ss)) {
    PyErr_SetString(PyExc_TypeError, "Replay: slot params and sources: tuples of one length");
    return -1;
  }
  L->nslots = (int)PyTuple_GET_SIZE(sp);
  L->slot_param = PyMem_Calloc(L->nslots ? L->nslots : 1, sizeof(int));
  L->slot_src = PyMem_Calloc(L->nslots ? L->nslots : 1, sizeof(int));
  if (!L->slot_param || !L->slot_src)
    return (PyErr_NoMemory(), -1);
  for (int i = 0; i < L->nslots; i++) {
    if (int_in(PyTuple_GET_ITEM(sp, i), 0, params - 1 - (long)L->s->trailing, &L->slot_param[i],
               "a slot's parameter") ||
        int_in(PyTuple_GET_ITEM(ss, i), 0, n_src - 1, &L->slot_src[i], "a slot's source"))
      return -1;
  }
  return 0;
}

static PyObject *replay_call(WgReplay *r, PyObject *const *args, size_t nargsf, PyObject *kw);

static PyObject *replay_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
  int n_in;
  PyObject *device, *get_device, *get_stream, *stream, *runtime, *hooks, *modes, *slow, *fast;
  PyObject *launches, *result, *refused;
  if (kwds && PyDict_GET_SIZE(kwds)) {
    PyErr_SetString(PyExc_TypeError, "Replay takes positional arguments only");
    return NULL;
  }
  if (!PyArg_ParseTuple(args, "iOOOOOO!O!O!O!O!OO:Replay", &n_in, &device, &get_device,
                        &get_stream, &stream, &runtime, &PyTuple_Type, &hooks, &PyTuple_Type,
                        &modes, &PyTuple_Type, &slow, &PyTuple_Type, &fast, &PyTuple_Type,
                        &launches, &result, &refused))
    return NULL;
  if (n_in < 1 || n_in > 64 || PyTuple_GET_SIZE(hooks) != 2 ||
      PyTuple_GET_SIZE(slow) != PyTuple_GET_SIZE(fast) || PyTuple_GET_SIZE(slow) > 64 ||
      PyTuple_GET_SIZE(launches) < 1 || PyTuple_GET_SIZE(launches) > 64 || !PyLong_Check(device) ||
      (stream != Py_None && !PyLong_Check(stream))) {
    PyErr_SetString(PyExc_ValueError, "Replay: malformed arguments");
    return NULL;
  }
  WgReplay *r = (WgReplay *)type->tp_alloc(type, 0);
  if (!r)
    return NULL;
  r->vectorcall = (vectorcallfunc)replay_call;
  r->n_in = n_in;
  r->n_alloc = (int)PyTuple_GET_SIZE(slow);
  PyObject *keep[] = {device, get_device, get_stream, stream, runtime, hooks,
                      modes,  slow,       fast,       refused, launches};
  PyObject **dst[] = {&r->device, &r->get_device, &r->get_stream, &r->stream,
                      &r->runtime, &r->hooks,     &r->modes,      &r->slow,
                      &r->fast,    &r->refused,   &r->launches_obj};
  for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++) {
    Py_INCREF(keep[i]);
    *dst[i] = keep[i];
  }
  int n_src = n_in + r->n_alloc;
  if (PyLong_Check(result)) {
    r->n_result = 1;
    r->result_src = PyMem_Calloc(1, sizeof(int));
    if (!r->result_src) {
      PyErr_NoMemory();
      goto fail;
    }
    if (int_in(result, n_in, n_src - 1, &r->result_src[0], "the result's allocation"))
      goto fail;
  } else if (PyTuple_Check(result)) {
    r->tuple_result = 1;
    r->n_result = (int)PyTuple_GET_SIZE(result);
    r->result_src = PyMem_Calloc(r->n_result ? r->n_result : 1, sizeof(int));
    if (!r->result_src) {
      PyErr_NoMemory();
      goto fail;
    }
    for (int i = 0; i < r->n_result; i++) {
      int v;
      if (int_in(PyTuple_GET_ITEM(result, i), -1, n_src - 1, &v, "a result's source"))
        goto fail;
      if (v >= 0 && v < n_in) {
        PyErr_SetString(PyExc_ValueError, "Replay: a result must be an allocation or None");
        goto fail;
      }
      r->result_src[i] = v;
    }
  } else {
    PyErr_SetString(PyExc_TypeError, "Replay: result must be an int or a tuple of ints");
    goto fail;
  }
  r->n_launch = (int)PyTuple_GET_SIZE(launches);
  r->launches = PyMem_Calloc(r->n_launch, sizeof(WgLaunch));
  if (!r->launches) {
    PyErr_NoMemory();
    goto fail;
  }
  for (int k = 0; k < r->n_launch; k++)
    if (replay_launch_init(&r->launches[k], PyTuple_GET_ITEM(launches, k), n_src))
      goto fail;
  return (PyObject *)r;
fail:
  Py_DECREF(r);
  return NULL;
}

/* 1: a launch hook is installed (refuse), 0: none, -1: error */
static int hook_active(PyObject *runtime, PyObject *name, PyObject *chain) {
  PyObject *h = PyObject_GetAttr(runtime, name);
  if (!h)
    return -1;
  int other = h != chain;
  Py_DECREF(h);
  if (other)
    return 1;
  PyObject *calls = PyObject_GetAttr(chain, str_calls);
  if (!calls)
    return -1;
  int t = PyObject_IsTrue(calls);
  Py_DECREF(calls);
  return t;
}

static int ptr_of(PyObject *o, uint64_t *out) {
  *out = PyLong_AsUnsignedLongLong(o);
  return (*out == (uint64_t)-1 && PyErr_Occurred()) ? -1 : 0;
}

/* Everything but the driver calls: 1 refused, 0 ready (allocations in a[], pointers in p[]),
 * -1 error. */
static int replay_prepare(WgReplay *r, PyObject *const *args, Py_ssize_t nargs, PyObject **a,
                          uint64_t *p, uint64_t *stream) {
  if (nargs != 1 + r->n_in) {
    PyErr_Format(PyExc_TypeError, "Replay: takes (tensors, %d pointers), got %zd arguments",
                 r->n_in, nargs);
    return -1;
  }
  for (int i = 0; i < r->n_in; i++)
    if (ptr_of(args[1 + i], &p[i]))
      return -1;
  PyObject *dev = r->device;
  if (r->get_device != Py_None) {
    PyObject *d = PyObject_CallNoArgs(r->get_device);
    if (!d)
      return -1;
    int same = PyObject_RichCompareBool(d, r->device, Py_EQ);
    Py_DECREF(d);
    if (same <= 0)
      return same < 0 ? -1 : 1;
  }
  PyObject *st = NULL;
  if (r->stream != Py_None) {
    st = PyObject_CallOneArg(r->get_stream, dev);
    if (!st)
      return -1;
    int same = PyObject_RichCompareBool(st, r->stream, Py_EQ);
    if (same <= 0) {
      Py_DECREF(st);
      return same < 0 ? -1 : 1;
    }
  }
  int h = hook_active(r->runtime, str_enter, PyTuple_GET_ITEM(r->hooks, 0));
  if (h == 0)
    h = hook_active(r->runtime, str_exit, PyTuple_GET_ITEM(r->hooks, 1));
  if (h) {
    Py_XDECREF(st);
    return h;
  }
  for (int i = 0; i < r->n_in; i++)
    for (int j = i + 1; j < r->n_in; j++)
      if (p[i] == p[j]) {
        Py_XDECREF(st);
        return 1;
      }
  PyObject *allocs = r->fast;
  for (Py_ssize_t m = 0; m < PyTuple_GET_SIZE(r->modes); m++) {
    PyObject *v = PyObject_CallNoArgs(PyTuple_GET_ITEM(r->modes, m));
    if (!v) {
      Py_XDECREF(st);
      return -1;
    }
    int t = PyObject_IsTrue(v);
    Py_DECREF(v);
    if (t < 0) {
      Py_XDECREF(st);
      return -1;
    }
    if (t) {
      allocs = r->slow;
      break;
    }
  }
  int j = 0, status = 0;
  for (; j < r->n_alloc; j++) {
    a[j] = PyObject_CallNoArgs(PyTuple_GET_ITEM(allocs, j));
    if (!a[j]) {
      status = -1;
      break;
    }
    PyObject *q = PyObject_CallMethodNoArgs(a[j], data_ptr_str);
    if (!q) {
      j++;
      status = -1;
      break;
    }
    int bad = ptr_of(q, &p[r->n_in + j]);
    Py_DECREF(q);
    if (bad) {
      j++;
      status = -1;
      break;
    }
    if (p[r->n_in + j] & 15) {
      j++;
      status = 1;
      break;
    }
  }
  if (status == 0) {
    if (!st)
      st = PyObject_CallOneArg(r->get_stream, dev);
    if (!st || ptr_of(st, stream))
      status = -1;
  }
  Py_XDECREF(st);
  if (status) {
    for (int k = 0; k < j; k++)
      Py_XDECREF(a[k]);
  }
  return status;
}

static PyObject *replay_result(WgReplay *r, PyObject **a) {
  PyObject *out;
  if (!r->tuple_result) {
    out = a[r->result_src[0] - r->n_in];
    Py_INCREF(out);
  } else {
    out = PyTuple_New(r->n_result);
    if (out)
      for (int i = 0; i < r->n_result; i++) {
        PyObject *v = r->result_src[i] < 0 ? Py_None : a[r->result_src[i] - r->n_in];
        Py_INCREF(v);
        PyTuple_SET_ITEM(out, i, v);
      }
  }
  for (int j = 0; j < r->n_alloc; j++)
    Py_DECREF(a[j]);
  return out;
}

static void fill(const WgLaunch *L, const uint64_t *p, uint64_t *storage, void **params) {
  memcpy(storage, L->storage, (size_t)L->nparams * 8);
  for (int i = 0; i < L->nslots; i++)
    storage[L->slot_param[i]] = p[L->slot_src[i]];
  for (int i = 0; i < L->nparams; i++)
    params[i] = &storage[i];
}

static PyObject *replay_call(WgReplay *r, PyObject *const *args, size_t nargsf, PyObject *kw) {
  if (kw && PyTuple_GET_SIZE(kw)) {
    PyErr_SetString(PyExc_TypeError, "Replay takes no keyword arguments");
    return NULL;
  }
  PyObject *a[64];
  uint64_t p[128], stream = 0;
  int st = replay_prepare(r, args, PyVectorcall_NARGS(nargsf), a, p, &stream);
  if (st) {
    if (st < 0)
      return NULL;
    Py_INCREF(r->refused);
    return r->refused;
  }
  if (load_cuda() || ensure_context(r->launches[0].name))
    goto error;
  uint64_t storage[WG_MAX_PARAMS];
  void *params[WG_MAX_PARAMS];
  for (int k = 0; k < r->n_launch; k++) {
    const WgLaunch *L = &r->launches[k];
    if ((uint64_t)L->gx * L->gy * L->gz == 0)
      continue;
    fill(L, p, storage, params);
    CUresult res = launch_packed(L->s, L->gx, L->gy, L->gz, stream, params);
    if (res != CUDA_SUCCESS) {
      cuda_error(res, "cuLaunchKernel (replay)", L->name);
      goto error;
    }
  }
  return replay_result(r, a);
error:
  for (int j = 0; j < r->n_alloc; j++)
    Py_DECREF(a[j]);
  return NULL;
}

/* replay.dry(tensors, i0, ...) -> (result, stream, [params bytes per launch]) or refused: the
 * call without the driver (tests on a machine without a GPU). */
static PyObject *replay_dry(WgReplay *r, PyObject *const *args, Py_ssize_t nargs) {
  PyObject *a[64];
  uint64_t p[128], stream = 0;
  int st = replay_prepare(r, args, nargs, a, p, &stream);
  if (st) {
    if (st < 0)
      return NULL;
    Py_INCREF(r->refused);
    return r->refused;
  }
  PyObject *packed = PyList_New(r->n_launch);
  if (!packed) {
    for (int j = 0; j < r->n_alloc; j++)
      Py_DECREF(a[j]);
    return NULL;
  }
  uint64_t storage[WG_MAX_PARAMS];
  void *params[WG_MAX_PARAMS];
  for (int k = 0; k < r->n_launch; k++) {
    fill(&r->launches[k], p, storage, params);
    PyList_SET_ITEM(packed, k,
                    PyBytes_FromStringAndSize((const char *)storage,
                                              (Py_ssize_t)r->launches[k].nparams * 8));
  }
  PyObject *out = replay_result(r, a);
  if (!out) {
    Py_DECREF(packed);
    return NULL;
  }
  return Py_BuildValue("(NKN)", out, (unsigned long long)stream, packed);
}

static PyObject *replay_get(WgReplay *r, void *which) {
  PyObject *v = NULL;
  switch ((int)(intptr_t)which) {
  case 0: v = r->modes; break;
  case 1: v = r->get_device; break;
  case 2: v = r->fast; break;
  case 3: v = r->slow; break;
  case 4: v = r->launches_obj; break;
  case 5: return PyLong_FromLong(r->n_in);
  default: v = Py_None;
  }
  Py_INCREF(v);
  return v;
}

static PyGetSetDef replay_getset[] = {
    {"modes", (getter)replay_get, NULL, "the mode checks that send allocations to slow", (void *)0},
    {"get_device", (getter)replay_get, NULL, "None: the current device is not read", (void *)1},
    {"fast", (getter)replay_get, NULL, "the allocators without a mode", (void *)2},
    {"slow", (getter)replay_get, NULL, "the allocators under a mode", (void *)3},
    {"launches", (getter)replay_get, NULL, "the recorded launches", (void *)4},
    {"n_in", (getter)replay_get, NULL, "number of inputs", (void *)5},
    {NULL}};

static PyMethodDef replay_methods[] = {
    {"dry", (PyCFunction)(void (*)(void))replay_dry, METH_FASTCALL,
     "dry(tensors, *pointers) -> (result, stream, [params]) or refused: no driver call"},
    {NULL, NULL, 0, NULL}};

static PyTypeObject ReplayType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_wg_clauncher.Replay",
    .tp_basicsize = sizeof(WgReplay),
    .tp_dealloc = (destructor)replay_dealloc,
    .tp_vectorcall_offset = offsetof(WgReplay, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "a recorded call's replay in one C call (see _clauncher.c)",
    .tp_new = replay_new,
    .tp_methods = replay_methods,
    .tp_getset = replay_getset,
};

/* ------------------------------------------------------------------------------------- Hit
 *
 * Hit(kinds, entries, slow, la, rp, grad_enabled, stats, T, P, Q, scalars, miss, refused,
 *     needs_grad): the guarded section of a launcher's unrolled hit (_replay_hit._guarded) in
 * C, called as hit(args). ``kinds`` has one letter per argument: "T" a plain tensor, "S" a
 * scalar, "Q" an Int4Weight (its packed and scales tensors, its group_size compared as a
 * scalar). When the arguments are of those kinds, no recording runs and replay and the cached
 * launch are on (la._RECORDING is None, rp.ENABLED, la.FAST), it tries each entry
 * (check, sc, al, replay, cuda, rg) of the live list ``entries`` as the Python hit does: the
 * tensor guard, the scalars, the device (cuda or rp.ANY_DEVICE), the pointers' packed 16-byte
 * alignment, then the replay, counting in ``stats`` and returning what the Python hit returns.
 * Everything else is ``slow(args)``: the same hit without its guarded section. */

#define WG_HIT_MAX 16

typedef struct {
  PyObject_HEAD vectorcallfunc vectorcall;
  int n;               /* arguments */
  char kinds[WG_HIT_MAX];
  PyObject *entries;   /* list, shared with the Python hit (_replay_hit._learn updates it) */
  PyObject *slow, *la, *rp, *grad_enabled, *stats, *T, *P, *Q, *scalars;
  PyObject *miss, *refused, *needs_grad;
} WgHit;

static PyObject *str_recording = NULL, *str_enabled = NULL, *str_fast = NULL,
                *str_any_device = NULL, *str_packed = NULL, *str_scales = NULL,
                *str_group_size = NULL, *str_replays = NULL, *str_refused = NULL;

static void hit_dealloc(WgHit *h) {
  Py_XDECREF(h->entries);
  Py_XDECREF(h->slow);
  Py_XDECREF(h->la);
  Py_XDECREF(h->rp);
  Py_XDECREF(h->grad_enabled);
  Py_XDECREF(h->stats);
  Py_XDECREF(h->T);
  Py_XDECREF(h->P);
  Py_XDECREF(h->Q);
  Py_XDECREF(h->scalars);
  Py_XDECREF(h->miss);
  Py_XDECREF(h->refused);
  Py_XDECREF(h->needs_grad);
  Py_TYPE(h)->tp_free((PyObject *)h);
}

static PyObject *hit_call(WgHit *h, PyObject *const *args, size_t nargsf, PyObject *kw);

static PyObject *hit_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
  const char *kinds;
  Py_ssize_t nk;
  PyObject *entries, *slow, *la, *rp, *grad_enabled, *stats, *T, *P, *Q, *scalars, *miss,
      *refused, *needs_grad;
  if (kwds && PyDict_GET_SIZE(kwds)) {
    PyErr_SetString(PyExc_TypeError, "Hit takes positional arguments only");
    return NULL;
  }
  if (!PyArg_ParseTuple(args, "s#O!OOOOO!OOOOOOO:Hit", &kinds, &nk, &PyList_Type, &entries,
                        &slow, &la, &rp, &grad_enabled, &PyDict_Type, &stats, &T, &P, &Q,
                        &scalars, &miss, &refused, &needs_grad))
    return NULL;
  if (nk < 1 || nk > WG_HIT_MAX) {
    PyErr_SetString(PyExc_ValueError, "Hit: 1 to 16 argument kinds");
    return NULL;
  }
  for (Py_ssize_t i = 0; i < nk; i++)
    if (kinds[i] != 'T' && kinds[i] != 'S' && kinds[i] != 'Q') {
      PyErr_Format(PyExc_ValueError, "Hit: unknown argument kind '%c'", kinds[i]);
      return NULL;
    }
  if (!PyType_Check(T) || !PyType_Check(P) || !PyType_Check(Q) || !PyAnySet_Check(scalars)) {
    PyErr_SetString(PyExc_TypeError, "Hit: T, P, Q must be types and scalars a set");
    return NULL;
  }
  WgHit *h = (WgHit *)type->tp_alloc(type, 0);
  if (!h)
    return NULL;
  h->vectorcall = (vectorcallfunc)hit_call;
  h->n = (int)nk;
  memcpy(h->kinds, kinds, (size_t)nk);
  PyObject *keep[] = {entries, slow, la, rp, grad_enabled, stats, T, P, Q, scalars, miss,
                      refused, needs_grad};
  PyObject **dst[] = {&h->entries, &h->slow, &h->la, &h->rp, &h->grad_enabled, &h->stats,
                      &h->T, &h->P, &h->Q, &h->scalars, &h->miss, &h->refused, &h->needs_grad};
  for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++) {
    Py_INCREF(keep[i]);
    *dst[i] = keep[i];
  }
  return (PyObject *)h;
}

/* 1 when module attribute ``name`` is truthy, 0 when not, -1 on error */
static int attr_true(PyObject *obj, PyObject *name) {
  PyObject *v = PyObject_GetAttr(obj, name);
  if (!v)
    return -1;
  int t = PyObject_IsTrue(v);
  Py_DECREF(v);
  return t;
}

/* stats[key] += 1 */
static int count(PyObject *stats, PyObject *key) {
  PyObject *v = PyDict_GetItemWithError(stats, key); /* borrowed */
  if (!v && PyErr_Occurred())
    return -1;
  PyObject *one = PyLong_FromLong(1);
  if (!one)
    return -1;
  PyObject *s = v ? PyNumber_Add(v, one) : one;
  if (v)
    Py_DECREF(one);
  if (!s)
    return -1;
  int r = PyDict_SetItem(stats, key, s);
  Py_DECREF(s);
  return r;
}

static PyObject *hit_call(WgHit *h, PyObject *const *cargs, size_t nargsf, PyObject *kw) {
  if (PyVectorcall_NARGS(nargsf) != 1 || (kw && PyTuple_GET_SIZE(kw))) {
    PyErr_SetString(PyExc_TypeError, "hit(args) takes one tuple");
    return NULL;
  }
  PyObject *args = cargs[0];
  if (!PyTuple_CheckExact(args) || PyTuple_GET_SIZE(args) != h->n)
    return PyObject_CallOneArg(h->slow, args);
  PyObject *tensors[2 * WG_HIT_MAX]; /* borrowed, except Q's two (owned: held in qrefs) */
  PyObject *scal[WG_HIT_MAX];        /* borrowed or owned (Q's group_size: in qrefs) */
  PyObject *qrefs[3 * WG_HIT_MAX];
  int nt = 0, ns = 0, nq = 0;
  PyObject *result = NULL;
  for (int i = 0; i < h->n; i++) {
    PyObject *a = PyTuple_GET_ITEM(args, i);
    PyTypeObject *ta = Py_TYPE(a);
    if (h->kinds[i] == 'T') {
      if ((PyObject *)ta != h->T && (PyObject *)ta != h->P)
        goto slow;
      tensors[nt++] = a;
    } else if (h->kinds[i] == 'S') {
      int in = PySet_Contains(h->scalars, (PyObject *)ta);
      if (in < 0)
        goto error;
      if (!in)
        goto slow;
      scal[ns++] = a;
    } else {
      if ((PyObject *)ta != h->Q)
        goto slow;
      PyObject *p = PyObject_GetAttr(a, str_packed);
      if (!p)
        goto error;
      qrefs[nq++] = p;
      PyObject *q = PyObject_GetAttr(a, str_scales);
      if (!q)
        goto error;
      qrefs[nq++] = q;
      if ((PyObject *)Py_TYPE(p) != h->T || (PyObject *)Py_TYPE(q) != h->T)
        goto slow;
      PyObject *g = PyObject_GetAttr(a, str_group_size);
      if (!g)
        goto error;
      qrefs[nq++] = g;
      tensors[nt++] = p;
      tensors[nt++] = q;
      scal[ns++] = g;
    }
  }
  {
    PyObject *rec = PyObject_GetAttr(h->la, str_recording);
    if (!rec)
      goto error;
    int recording = rec != Py_None;
    Py_DECREF(rec);
    if (recording)
      goto slow;
    int t = attr_true(h->rp, str_enabled);
    if (t > 0)
      t = attr_true(h->la, str_fast);
    if (t < 0)
      goto error;
    if (!t)
      goto slow;
  }
  for (Py_ssize_t e = 0; e < PyList_GET_SIZE(h->entries); e++) {
    PyObject *entry = PyList_GET_ITEM(h->entries, e);
    if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 6) {
      PyErr_SetString(PyExc_TypeError, "Hit: an entry is (check, sc, al, replay, cuda, rg)");
      goto error;
    }
    Py_INCREF(entry); /* the list may change under the calls below */
    PyObject *ok = PyObject_Vectorcall(PyTuple_GET_ITEM(entry, 0), tensors, nt, NULL);
    int pass = ok ? PyObject_IsTrue(ok) : -1;
    Py_XDECREF(ok);
    if (pass > 0) { /* the scalars, in argument order: S as (type, value), Q's group size */
      PyObject *sc = PyTuple_GET_ITEM(entry, 1);
      if (!PyTuple_Check(sc) || PyTuple_GET_SIZE(sc) != ns) {
        pass = 0;
      } else {
        int j = 0;
        for (int i = 0; i < h->n && pass > 0; i++) {
          if (h->kinds[i] == 'T')
            continue;
          PyObject *want = PyTuple_GET_ITEM(sc, j);
          if (h->kinds[i] == 'S') {
            if (!PyTuple_Check(want) || PyTuple_GET_SIZE(want) != 2 ||
                PyTuple_GET_ITEM(want, 0) != (PyObject *)Py_TYPE(scal[j]))
              pass = 0;
            else
              pass = PyObject_RichCompareBool(scal[j], PyTuple_GET_ITEM(want, 1), Py_EQ);
          } else {
            pass = PyObject_RichCompareBool(scal[j], want, Py_EQ);
          }
          j++;
        }
      }
    }
    if (pass > 0 && !PyObject_IsTrue(PyTuple_GET_ITEM(entry, 4))) /* not cuda */
      pass = attr_true(h->rp, str_any_device);
    if (pass <= 0) {
      Py_DECREF(entry);
      if (pass < 0)
        goto error;
      continue;
    }
    /* the pointers, and their 16-byte alignments packed 4 bits per tensor */
    PyObject *call[1 + 2 * WG_HIT_MAX];
    unsigned long long al = 0;
    int k = 0, bad = 0;
    for (; k < nt; k++) {
      PyObject *d = PyObject_CallMethodNoArgs(tensors[k], data_ptr_str);
      if (!d) {
        bad = 1;
        break;
      }
      call[1 + k] = d;
      unsigned long long v = PyLong_AsUnsignedLongLong(d);
      if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        k++;
        bad = 1;
        break;
      }
      al |= (v & 15ull) << (4 * k);
    }
    if (!bad) {
      unsigned long long want = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(entry, 2));
      if (want == (unsigned long long)-1 && PyErr_Occurred())
        bad = 1;
      else if (want != al)
        bad = 2;
    }
    if (bad) {
      for (int m = 1; m <= k; m++)
        Py_DECREF(call[m]);
      Py_DECREF(entry);
      if (bad == 1)
        goto error;
      continue; /* another alignment: the next entry */
    }
    PyObject *tup = PyTuple_New(nt);
    if (!tup) {
      for (int m = 1; m <= nt; m++)
        Py_DECREF(call[m]);
      Py_DECREF(entry);
      goto error;
    }
    for (int m = 0; m < nt; m++) {
      Py_INCREF(tensors[m]);
      PyTuple_SET_ITEM(tup, m, tensors[m]);
    }
    call[0] = tup;
    PyObject *out = PyObject_Vectorcall(PyTuple_GET_ITEM(entry, 3), call, 1 + nt, NULL);
    for (int m = 0; m <= nt; m++)
      Py_DECREF(call[m]);
    if (!out) {
      Py_DECREF(entry);
      goto error;
    }
    int rg = PyObject_IsTrue(PyTuple_GET_ITEM(entry, 5));
    Py_DECREF(entry);
    if (rg) {
      PyObject *ge = PyObject_CallNoArgs(h->grad_enabled);
      int on = ge ? PyObject_IsTrue(ge) : -1;
      Py_XDECREF(ge);
      if (on < 0) {
        Py_DECREF(out);
        goto error;
      }
      if (on) { /* autograd records the call */
        if (out == h->refused) {
          Py_DECREF(out);
          Py_INCREF(h->needs_grad);
          result = h->needs_grad;
          goto done;
        }
        if (count(h->stats, str_replays)) {
          Py_DECREF(out);
          goto error;
        }
        result = PyList_New(1);
        if (!result) {
          Py_DECREF(out);
          goto error;
        }
        PyList_SET_ITEM(result, 0, out);
        goto done;
      }
    }
    if (count(h->stats, out == h->refused ? str_refused : str_replays)) {
      Py_DECREF(out);
      goto error;
    }
    result = out;
    goto done;
  }
slow:
  result = PyObject_CallOneArg(h->slow, args);
  goto done;
error:
  result = NULL;
done:
  for (int m = 0; m < nq; m++)
    Py_DECREF(qrefs[m]);
  return result;
}

static PyObject *hit_get(WgHit *h, void *which) {
  PyObject *v;
  switch ((int)(intptr_t)which) {
  case 0: v = h->entries; break;
  case 1: v = h->slow; break;
  default: return PyUnicode_FromStringAndSize(h->kinds, h->n);
  }
  Py_INCREF(v);
  return v;
}

static PyGetSetDef hit_getset[] = {
    {"entries", (getter)hit_get, NULL, "the guarded entries (shared with the Python hit)",
     (void *)0},
    {"slow", (getter)hit_get, NULL, "the Python hit without its guarded section", (void *)1},
    {"kinds", (getter)hit_get, NULL, "one letter per argument", (void *)2},
    {NULL}};

static PyTypeObject HitType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_wg_clauncher.Hit",
    .tp_basicsize = sizeof(WgHit),
    .tp_dealloc = (destructor)hit_dealloc,
    .tp_vectorcall_offset = offsetof(WgHit, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "a launcher's guarded hit in C (see _clauncher.c)",
    .tp_new = hit_new,
    .tp_getset = hit_getset,
};

static PyMethodDef methods[] = {
    {"launch", (PyCFunction)(void (*)(void))launch, METH_FASTCALL,
     "launch(gridX, gridY, gridZ, stream, spec, *args)"},
    {"pack", (PyCFunction)(void (*)(void))pack_only, METH_FASTCALL,
     "pack(spec, *args) -> bytes (tests)"},
    {"launches", launches, METH_NOARGS, "number of successful launches"},
    {"time_launches", (PyCFunction)(void (*)(void))time_launches, METH_FASTCALL,
     "time_launches(n, gridX, gridY, gridZ, stream, spec, *args) -> ns per launch"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_wg_clauncher", NULL, -1, methods};

PyMODINIT_FUNC PyInit__wg_clauncher(void) {
  data_ptr_str = PyUnicode_InternFromString("data_ptr");
  str_enter = PyUnicode_InternFromString("launch_enter_hook");
  str_exit = PyUnicode_InternFromString("launch_exit_hook");
  str_calls = PyUnicode_InternFromString("calls");
  str_recording = PyUnicode_InternFromString("_RECORDING");
  str_enabled = PyUnicode_InternFromString("ENABLED");
  str_fast = PyUnicode_InternFromString("FAST");
  str_any_device = PyUnicode_InternFromString("ANY_DEVICE");
  str_packed = PyUnicode_InternFromString("packed");
  str_scales = PyUnicode_InternFromString("scales");
  str_group_size = PyUnicode_InternFromString("group_size");
  str_replays = PyUnicode_InternFromString("replays");
  str_refused = PyUnicode_InternFromString("refused");
  if (!data_ptr_str || !str_enter || !str_exit || !str_calls || !str_recording || !str_enabled ||
      !str_fast || !str_any_device || !str_packed || !str_scales || !str_group_size ||
      !str_replays || !str_refused)
    return NULL;
  if (PyType_Ready(&ReplayType) < 0 || PyType_Ready(&HitType) < 0)
    return NULL;
  PyObject *m = PyModule_Create(&moduledef);
  if (!m)
    return NULL;
  Py_INCREF(&ReplayType);
  if (PyModule_AddObject(m, "Replay", (PyObject *)&ReplayType) < 0) {
    Py_DECREF(&ReplayType);
    Py_DECREF(m);
    return NULL;
  }
  Py_INCREF(&HitType);
  if (PyModule_AddObject(m, "Hit", (PyObject *)&HitType) < 0) {
    Py_DECREF(&HitType);
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
