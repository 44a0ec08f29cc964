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
  if (r != CUDA_SUCCESS)
    return cuda_error(r, "cuLaunchKernel", kernel);
  n_launches++;
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
  if (!data_ptr_str)
    return NULL;
  return PyModule_Create(&moduledef);
}
