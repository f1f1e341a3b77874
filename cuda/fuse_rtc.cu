// fuse_rtc.cu — fused elementwise chains compiled at run time (issue 28).
//
// tensor/tfuse.c records a chain of elementwise ops on CUDA tensors and
// tensor/tfuse_codegen.c writes it as the source of ONE kernel,
// `nabla_fused(long long n, FuseArgs a)` (a grid-stride loop; the argument
// block is tfuse_codegen.h's nt_FuseArgs).  Here that source is compiled
// and launched:
//   * on a GPU by NVRTC (libnvrtc, dlopen()ed on first use like cuFFT and
//     cuSOLVER: vendor_load.cuh) for the device's own sm_XY, loaded with the
//     driver API (libcuda.so.1, dlopen()ed too: cuModuleLoadData,
//     cuLaunchKernel on the compute stream);
//   * on the emulated device by the host C++ compiler the emulator was built
//     with (cuda/emu/rtc_config.h, written by meson), with emu.h and the
//     emulator's load/store instrumentation, into a shared object cached on
//     disk per user (~/.cache/nabla/fused-emu/<hash>.so) and dlopen()ed; it
//     reaches the emulator through rtc_bind.h's table, so the emulator's
//     launch and memory checks apply to the generated kernel as to ours.
// Compiled kernels are cached in memory by the source's hash and text; at
// most kMaxKernels (then new chains run unfused, with that reason: a module
// or .so is never unloaded, since a captured CUDA graph may still launch it).
// The op "fused_chain" (tensor/tfuse_rtc.h: the op table's extension point,
// no module ABI entry) carries the source and arguments.  When nothing can
// compile (no NVRTC, no compiler) it says so with the reason, once and for
// all, and tfuse.c runs the chains op by op.
#include "common.cuh"
#include "vendor_load.cuh"
#include "tensor/tfuse_rtc.h"
#include <chrono>
#include <errno.h>
#include <string.h>
#include <mutex>
#include <string>
#include <vector>
#ifdef NABLA_CUDA_EMU
#include "cuda/emu/rtc_bind.h"
#include "cuda/emu/rtc_config.h"
#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>
#include <algorithm>
#else
#include <cuda.h>
#include <nvrtc.h>
#endif

namespace ncu {
namespace {

constexpr int kMaxKernels = 256;

struct Kernel {
  uint64_t key;
  std::string src;
  void *fn;          // CUfunction, or the emulated object's launcher; nullptr: it failed to compile
};

std::mutex mu;
std::vector<Kernel> kernels;
int64_t n_compiles, n_hits;
double compile_seconds;
int unavailable = -1;          // -1: not probed yet; 1: cannot compile here (why)
char unavailable_why[600];

#ifndef NABLA_CUDA_EMU
// ---- NVRTC and the driver API, loaded on first use ----------------------------------------
struct Rtc {
  nvrtcResult (*create)(nvrtcProgram *, const char *, const char *, int, const char *const *, const char *const *);
  nvrtcResult (*compile)(nvrtcProgram, int, const char *const *);
  nvrtcResult (*log_size)(nvrtcProgram, size_t *);
  nvrtcResult (*log)(nvrtcProgram, char *);
  nvrtcResult (*cubin_size)(nvrtcProgram, size_t *);
  nvrtcResult (*cubin)(nvrtcProgram, char *);
  nvrtcResult (*destroy)(nvrtcProgram *);
  const char *(*error_string)(nvrtcResult);
  CUresult (*module_load_data)(CUmodule *, const void *);
  CUresult (*module_get_function)(CUfunction *, CUmodule, const char *);
  CUresult (*launch_kernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void **, void **);
  int arch;          // 10 * major + minor
} rtc;

bool probe(char *why, size_t n) {
  static const char *const nvrtc_names[] = { "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so" };
  char e[400];
  void *h = dlopen_first(nvrtc_names, sizeof nvrtc_names / sizeof *nvrtc_names, e, sizeof e);
  if (!h) { snprintf(why, n, "NVRTC not found (%s)", e); return false; }
  static const char *const cuda_names[] = { "libcuda.so.1", "libcuda.so" };
  void *hc = dlopen_first(cuda_names, sizeof cuda_names / sizeof *cuda_names, e, sizeof e);
  if (!hc) { snprintf(why, n, "the CUDA driver library not found (%s)", e); return false; }
#define SYM(lib, what, field, name) \
  if (!(*(void **)&rtc.field = dlsym(lib, name))) { snprintf(why, n, "%s lacks %s", what, name); return false; }
  SYM(h, "NVRTC", create, "nvrtcCreateProgram") SYM(h, "NVRTC", compile, "nvrtcCompileProgram")
  SYM(h, "NVRTC", log_size, "nvrtcGetProgramLogSize") SYM(h, "NVRTC", log, "nvrtcGetProgramLog")
  SYM(h, "NVRTC", cubin_size, "nvrtcGetCUBINSize") SYM(h, "NVRTC", cubin, "nvrtcGetCUBIN")
  SYM(h, "NVRTC", destroy, "nvrtcDestroyProgram") SYM(h, "NVRTC", error_string, "nvrtcGetErrorString")
  SYM(hc, "libcuda", module_load_data, "cuModuleLoadData") SYM(hc, "libcuda", module_get_function, "cuModuleGetFunction")
  SYM(hc, "libcuda", launch_kernel, "cuLaunchKernel")
#undef SYM
  int maj = 0, min = 0;
  if (cudaDeviceGetAttribute(&maj, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&min, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    snprintf(why, n, "cannot read the device's compute capability");
    return false;
  }
  rtc.arch = 10 * maj + min;
  return true;
}

// the source as a cubin for this device's sm_XY, loaded; nullptr + error
void *compile(const std::string &src) {
  nvrtcProgram p;
  nvrtcResult r = rtc.create(&p, src.c_str(), "nabla_fused.cu", 0, nullptr, nullptr);
  if (r != NVRTC_SUCCESS) { host->error_set("fused chain: nvrtcCreateProgram: %s", rtc.error_string(r)); return nullptr; }
  char arch[48];
  snprintf(arch, sizeof arch, "--gpu-architecture=sm_%d", rtc.arch);
  // no fast math and fmad as nvcc's default: the unfused kernels' arithmetic
  const char *opts[] = { arch, "-std=c++17", "--include-path=/usr/local/cuda/include" };
  r = rtc.compile(p, 3, opts);
  if (r != NVRTC_SUCCESS) {
    size_t ln = 0;
    rtc.log_size(p, &ln);
    std::string log(ln + 1, 0);
    rtc.log(p, log.data());
    host->error_set("fused chain: NVRTC failed (%s): %.600s", rtc.error_string(r), log.c_str());
    rtc.destroy(&p);
    return nullptr;
  }
  size_t nb = 0;
  rtc.cubin_size(p, &nb);
  std::string bin(nb, 0);
  rtc.cubin(p, bin.data());
  rtc.destroy(&p);
  CUmodule m;
  CUfunction f;
  CUresult cr = rtc.module_load_data(&m, bin.data());
  if (cr == CUDA_SUCCESS) cr = rtc.module_get_function(&f, m, "nabla_fused");
  if (cr != CUDA_SUCCESS) { host->error_set("fused chain: loading the compiled kernel failed (CUresult %d)", (int)cr); return nullptr; }
  return (void *)f;
}

int launch(void *fn, int64_t n, const void *args) {
  long long nn = n;
  void *params[] = { &nn, (void *)args };
  CUresult r = rtc.launch_kernel((CUfunction)fn, grid_for(n), 1, 1, kThreads, 1, 1, 0, (CUstream)stream, params, nullptr);
  if (r != CUDA_SUCCESS) { host->error_set("fused chain: cuLaunchKernel failed (CUresult %d)", (int)r); return -1; }
  return launched("fused");
}

#else
// ---- the emulated device: the host compiler, a cached shared object ----------------------------
extern "C" void __sanitizer_cov_load1(void *);
extern "C" void __sanitizer_cov_load2(void *);
extern "C" void __sanitizer_cov_load4(void *);
extern "C" void __sanitizer_cov_load8(void *);
extern "C" void __sanitizer_cov_load16(void *);
extern "C" void __sanitizer_cov_store1(void *);
extern "C" void __sanitizer_cov_store2(void *);
extern "C" void __sanitizer_cov_store4(void *);
extern "C" void __sanitizer_cov_store8(void *);
extern "C" void __sanitizer_cov_store16(void *);

const RtcBind bind_table = {
  NABLA_RTC_BIND_VERSION, emu::run_launch, emu::thread_idx, emu::block_idx, emu::block_dim, emu::grid_dim,
  { __sanitizer_cov_load1, __sanitizer_cov_load2, __sanitizer_cov_load4, __sanitizer_cov_load8, __sanitizer_cov_load16 },
  { __sanitizer_cov_store1, __sanitizer_cov_store2, __sanitizer_cov_store4, __sanitizer_cov_store8, __sanitizer_cov_store16 },
};

typedef void (*Launcher)(unsigned, unsigned, cudaStream_t, long long, const void *);

// appended to the generated source: the host-side launch, as transform.py
// rewrites a module launch
const char *launcher_src =
  "\n#include <string.h>\n"
  "extern \"C\" __attribute__((visibility(\"default\"))) void nabla_fused_launch(unsigned grid, unsigned block, cudaStream_t st,\n"
  "                                                                         long long n, const void *args) {\n"
  "  FuseArgs a;\n  memcpy(&a, args, sizeof a);\n"
  "  ::emu::launch(::emu::Site{\"nabla_fused\", __FILE__, __LINE__}, ::emu::Config(dim3(grid), dim3(block), 0, st), nabla_fused, n, a);\n"
  "}\n";

std::string cache_dir;
uint64_t headers_hash;   // the emulator's files a compiled object depends on (headers_digest)

uint64_t fnv(uint64_t h, const char *p, size_t n) {
  for (size_t i = 0; i < n; i++) { h ^= (unsigned char)p[i]; h *= 1099511628211ull; }
  return h;
}

// The contents of what every generated object is built against: the
// emulator's header the flags -include (emu.h) and the bind stub it is
// linked with (rtc_stub.o: emu.h and rtc_bind.h compiled).  Their paths are in
// the key already; their contents are hashed once per process, so a rebuilt
// emulator never loads an object built against the old one.
// NABLA_FUSE_EMU_DEPS=file:file... hashes those files instead (the test's
// stand-in for an edited emu.h).  false + why when one cannot be read.
bool headers_digest(char *why, size_t n) {
  std::vector<std::string> files;
  if (const char *e = getenv("NABLA_FUSE_EMU_DEPS"); e && *e) {
    std::string l = e;
    for (size_t a = 0, b; a <= l.size(); a = b + 1) {
      b = l.find(':', a);
      if (b == std::string::npos) b = l.size();
      if (b > a) files.push_back(l.substr(a, b - a));
    }
  } else {
    std::string flags = NABLA_RTC_FLAGS;
    size_t at = flags.find("-include ");
    if (at != std::string::npos) {
      size_t a = at + 9, b = flags.find(' ', a);
      files.push_back(flags.substr(a, b == std::string::npos ? std::string::npos : b - a));
    }
    files.push_back(NABLA_RTC_STUB);
  }
  uint64_t h = 1469598103934665603ull;
  for (const std::string &f : files) {
    FILE *fp = fopen(f.c_str(), "rb");
    if (!fp) { snprintf(why, n, "cannot read %s (the emulator's compile key): %s", f.c_str(), strerror(errno)); return false; }
    char buf[65536];
    size_t k;
    h = fnv(h, f.c_str(), f.size() + 1);
    while ((k = fread(buf, 1, sizeof buf, fp)) > 0) h = fnv(h, buf, k);
    fclose(fp);
  }
  headers_hash = h;
  return true;
}

// The on-disk cache stays under a bound: past NABLA_FUSE_EMU_CACHE_MB
// megabytes (default 256) or NABLA_FUSE_EMU_CACHE_FILES objects (default
// 2000), the least recently used objects go (a load refreshes an object's
// mtime), and leftovers of compiles that died (<hash>.<pid>.* older than an
// hour).  Run after each new compile.  Another process that has an object
// loaded keeps its mapping; one about to load a trimmed object compiles it
// again.  The object just compiled is kept (and counted in the bound).
int64_t env_bound(const char *name, int64_t dflt) {
  const char *e = getenv(name);
  if (!e || !*e) return dflt;
  char *end;
  long long v = strtoll(e, &end, 10);
  return *end || v < 0 ? dflt : v > (1ll << 40) ? (1ll << 40) : v;
}
void trim_cache(const std::string &keep) {
  int64_t max_bytes = env_bound("NABLA_FUSE_EMU_CACHE_MB", 256) << 20, max_files = env_bound("NABLA_FUSE_EMU_CACHE_FILES", 2000);
  DIR *d = opendir(cache_dir.c_str());
  if (!d) return;
  struct Obj { double mtime; int64_t bytes; std::string path; };
  std::vector<Obj> objs;
  time_t now = time(nullptr);
  while (struct dirent *e = readdir(d)) {
    std::string name = e->d_name, path = cache_dir + "/" + name;
    struct stat st;
    if (name[0] == '.' || stat(path.c_str(), &st) || !S_ISREG(st.st_mode)) continue;
    bool obj = name.size() == 19 && name.compare(16, 3, ".so") == 0;
    if (!obj) {   // (a compile's temporaries: gone when it ends, unless it died)
      if (now - st.st_mtime > 3600) unlink(path.c_str());
      continue;
    }
    if (path == keep) continue;   // (the object about to be loaded)
    objs.push_back(Obj{ (double)st.st_mtim.tv_sec + 1e-9 * (double)st.st_mtim.tv_nsec, (int64_t)st.st_size, path });
  }
  closedir(d);
  std::sort(objs.begin(), objs.end(), [](const Obj &a, const Obj &b) { return a.mtime < b.mtime; });
  struct stat ks;
  int64_t bytes = stat(keep.c_str(), &ks) ? 0 : (int64_t)ks.st_size;
  for (const Obj &o : objs) bytes += o.bytes;
  for (size_t i = 0; i < objs.size() && (bytes > max_bytes || (int64_t)(objs.size() - i) >= max_files); i++) {
    unlink(objs[i].path.c_str());
    bytes -= objs[i].bytes;
  }
}

bool mkdirs(const std::string &p) {
  for (size_t i = 1; i <= p.size(); i++)
    if (i == p.size() || p[i] == '/') {
      std::string q = p.substr(0, i);
      if (mkdir(q.c_str(), 0700) && errno != EEXIST) return false;
    }
  return true;
}

bool probe(char *why, size_t n) {
  if (access(NABLA_RTC_CXX, X_OK)) { snprintf(why, n, "the emulator's compiler %s is not there", NABLA_RTC_CXX); return false; }
  if (access(NABLA_RTC_STUB, R_OK)) { snprintf(why, n, "%s is not built", NABLA_RTC_STUB); return false; }
  const char *c = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  if (c && *c) cache_dir = std::string(c) + "/nabla/fused-emu";
  else if (home && *home) cache_dir = std::string(home) + "/.cache/nabla/fused-emu";
  else cache_dir = "/tmp/nabla-" + std::to_string((long)getuid()) + "/fused-emu";
  if (!mkdirs(cache_dir)) { snprintf(why, n, "cannot create %s: %s", cache_dir.c_str(), strerror(errno)); return false; }
  return headers_digest(why, n);
}

void *compile(const std::string &src) {
  // the object's name: the source, the compiler and its flags, and the
  // contents of the emulator it is built against (another build, another object)
  std::string all = src + launcher_src + NABLA_RTC_CXX + NABLA_RTC_FLAGS + NABLA_RTC_STUB;
  uint64_t h = fnv(headers_hash, all.data(), all.size());
  char name[32];
  snprintf(name, sizeof name, "%016llx", (unsigned long long)h);
  std::string so = cache_dir + "/" + name + ".so";
  if (access(so.c_str(), R_OK)) {
    std::string tmp = cache_dir + "/" + name + "." + std::to_string((long)getpid());
    FILE *f = fopen((tmp + ".cpp").c_str(), "w");
    if (!f) { host->error_set("fused chain: cannot write %s.cpp: %s", tmp.c_str(), strerror(errno)); return nullptr; }
    fputs(src.c_str(), f);
    fputs(launcher_src, f);
    fclose(f);
    std::string cmd = std::string(NABLA_RTC_CXX) + " " + NABLA_RTC_FLAGS + " -shared -o " + tmp + ".so " + tmp + ".cpp " +
                      NABLA_RTC_STUB + " > " + tmp + ".log 2>&1";
    int rc = system(cmd.c_str());
    if (rc != 0) {
      std::string log;
      if (FILE *lf = fopen((tmp + ".log").c_str(), "r")) {
        char buf[700];
        size_t k = fread(buf, 1, sizeof buf - 1, lf);
        buf[k] = 0;
        log = buf;
        fclose(lf);
      }
      host->error_set("fused chain: the emulator's compiler failed (status %d; source kept in %s.cpp): %s", rc, tmp.c_str(), log.c_str());
      return nullptr;
    }
    unlink((tmp + ".cpp").c_str());
    unlink((tmp + ".log").c_str());
    // (atomic: a process loading the same entry sees the old object or this one, whole)
    if (rename((tmp + ".so").c_str(), so.c_str())) {
      host->error_set("fused chain: cannot rename into %s: %s", so.c_str(), strerror(errno));
      return nullptr;
    }
    trim_cache(so);
  } else utimes(so.c_str(), nullptr);   // (used: the trim's recency)
  void *lib = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) { host->error_set("fused chain: dlopen %s: %s", so.c_str(), dlerror()); return nullptr; }
  int (*bindf)(const RtcBind *) = (int (*)(const RtcBind *))dlsym(lib, "nabla_rtc_bind");
  void *fn = dlsym(lib, "nabla_fused_launch");
  if (!bindf || !fn || bindf(&bind_table)) { host->error_set("fused chain: %s is not a fused kernel of this build", so.c_str()); return nullptr; }
  return fn;
}

int launch(void *fn, int64_t n, const void *args) {
  ((Launcher)fn)(grid_for(n), kThreads, stream, (long long)n, args);
  return launched("fused");
}
#endif

// the "fused_chain" kernel (tensor/tfuse_rtc.h): compile (or find) and launch; or the counters
int k_fused_chain(const nt_KernelArgs *ka) {
  nt_FuseLaunch *fl = (nt_FuseLaunch *)ka->extra;
  if (!fl->src) {
    std::lock_guard<std::mutex> lk(mu);
    fl->compiles = n_compiles;
    fl->hits = n_hits;
    fl->seconds = compile_seconds;
    return 0;
  }
  if (bind_device()) return -1;
  void *fn = nullptr;
  {
    std::lock_guard<std::mutex> lk(mu);
    if (unavailable < 0) {
      const char *e = getenv("NABLA_FUSE_RTC");   // =0: no run-time compiles (debugging; the fallback's test)
      if (e && !strcmp(e, "0")) snprintf(unavailable_why, sizeof unavailable_why, "NABLA_FUSE_RTC=0");
      unavailable = e && !strcmp(e, "0") ? 1 : probe(unavailable_why, sizeof unavailable_why) ? 0 : 1;
    }
    if (unavailable) { fl->cannot = 1; snprintf(fl->why, sizeof fl->why, "%s", unavailable_why); return 0; }
    bool found = false;
    for (const Kernel &k : kernels)
      if (k.key == fl->key && k.src == fl->src) { fn = k.fn; n_hits++; found = true; break; }
    if (found && !fn) {   // (it failed before: not compiled again)
      fl->cannot = 2;
      snprintf(fl->why, sizeof fl->why, "it failed to compile before");
      return 0;
    }
    if (!fn) {
      if ((int)kernels.size() >= kMaxKernels) {
        fl->cannot = 1;
        snprintf(fl->why, sizeof fl->why, "the fused-kernel cache is full (%d chains compiled)", kMaxKernels);
        return 0;
      }
      auto t0 = std::chrono::steady_clock::now();
      fn = compile(fl->src);
      compile_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (!fn) {   // (this chain runs op by op: never a value left uncomputed; remembered)
        kernels.push_back(Kernel{ fl->key, fl->src, nullptr });
        fl->cannot = 2;
        snprintf(fl->why, sizeof fl->why, "%s", host->error_msg());
        return 0;
      }
      n_compiles++;
      kernels.push_back(Kernel{ fl->key, fl->src, fn });
    }
  }
  if (fl->n == 0) return 0;
  return launch(fn, fl->n, fl->args);
}

}  // namespace

void register_fuse_rtc(void) { host->register_kernel(host->op_register("fused_chain"), NT_CUDA, k_fused_chain); }

}  // namespace ncu
