// GPU smoke harness for generated kernels, independent of the JAX runtime and the FFI handler:
// one process per GPU, NVSHMEM bootstrapped with a unique id passed through a file, every
// buffer in symmetric memory, launched exactly as docs/calling_convention.md says.
//
//   harness RANK NRANKS WORKDIR CASE...   (built by run_smoke.py: nvcc -rdc=true ... -lnvshmem_device)
//
// WORKDIR/CASE/spec.txt lists the launch (see run_smoke.py, which writes it and checks the
// outputs); inputs are read from in<i>.r<RANK>.bin and outputs written to out<j>.r<RANK>.bin.
#include <cuda.h>
#include <cuda_runtime.h>
#include <nvshmem.h>
#include <nvshmemx.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#define TS_MAX_BUFFERS 32
struct TsLaunchArgs {
  int32_t pe;
  int32_t npes;
  const int32_t* pe_map;
  unsigned char* scratch;
  void* buffers[TS_MAX_BUFFERS];
  uint64_t wait_timeout_ns;  // 0: waits never give up (the harness has no record for them to fill)
  uint64_t launch_id;
  void* wait_fault;
};
static_assert(sizeof(TsLaunchArgs) == 304, "calling convention v2");

#define CHECK_CU(x)                                                                        \
  do {                                                                                     \
    CUresult r_ = (x);                                                                     \
    if (r_ != CUDA_SUCCESS) {                                                              \
      const char* s_ = nullptr;                                                            \
      cuGetErrorString(r_, &s_);                                                           \
      fprintf(stderr, "[rank %d] %s failed: %s\n", g_rank, #x, s_ ? s_ : "?");             \
      return 1;                                                                            \
    }                                                                                      \
  } while (0)
#define CHECK_RT(x)                                                                        \
  do {                                                                                     \
    cudaError_t r_ = (x);                                                                  \
    if (r_ != cudaSuccess) {                                                               \
      fprintf(stderr, "[rank %d] %s failed: %s\n", g_rank, #x, cudaGetErrorString(r_));    \
      return 1;                                                                            \
    }                                                                                      \
  } while (0)

static int g_rank = 0;

struct Spec {
  std::string cubin, entry;
  unsigned grid[3] = {1, 1, 1};
  unsigned threads = 128, smem = 0, scratch = 0, iters = 0;
  int nvshmem = 1;
  std::vector<int> pe_map;
  std::vector<size_t> in_bytes, out_bytes;
};

static bool read_spec(const std::string& path, Spec* s) {
  std::ifstream f(path);
  if (!f) return false;
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream ls(line);
    std::string key;
    ls >> key;
    if (key == "cubin") ls >> s->cubin;
    else if (key == "entry") ls >> s->entry;
    else if (key == "grid") ls >> s->grid[0] >> s->grid[1] >> s->grid[2];
    else if (key == "threads") ls >> s->threads;
    else if (key == "smem") ls >> s->smem;
    else if (key == "scratch") ls >> s->scratch;
    else if (key == "iters") ls >> s->iters;
    else if (key == "nvshmem") ls >> s->nvshmem;
    else if (key == "pe_map") { int v; while (ls >> v) s->pe_map.push_back(v); }
    else if (key == "in") { size_t b; ls >> b; s->in_bytes.push_back(b); }
    else if (key == "out") { size_t b; ls >> b; s->out_bytes.push_back(b); }
  }
  return true;
}

static size_t round_up(size_t n) { return ((n + 255) / 256) * 256; }

static int run_case(const std::string& dir, const std::string& name) {
  Spec s;
  if (!read_spec(dir + "/spec.txt", &s)) { fprintf(stderr, "no spec in %s\n", dir.c_str()); return 1; }
  CUmodule mod;
  CUfunction fn;
  CHECK_CU(cuModuleLoad(&mod, s.cubin.c_str()));
  if (s.nvshmem && nvshmemx_cumodule_init(mod) != 0) { fprintf(stderr, "cumodule_init failed\n"); return 1; }
  CHECK_CU(cuModuleGetFunction(&fn, mod, s.entry.c_str()));
  if (s.smem > 48 * 1024) CHECK_CU(cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, s.smem));

  // Symmetric allocations are collective: every rank makes the same ones in the same order.
  TsLaunchArgs args{};
  std::vector<size_t> sizes(s.in_bytes);
  sizes.insert(sizes.end(), s.out_bytes.begin(), s.out_bytes.end());
  std::vector<void*> bufs;
  for (size_t i = 0; i < sizes.size(); ++i) {
    void* p = nvshmem_malloc(round_up(sizes[i]));
    if (!p) { fprintf(stderr, "nvshmem_malloc(%zu) failed\n", sizes[i]); return 1; }
    bufs.push_back(p);
    args.buffers[i] = p;
    if (i < s.in_bytes.size()) {
      std::vector<char> host(sizes[i]);
      std::ifstream f(dir + "/in" + std::to_string(i) + ".r" + std::to_string(g_rank) + ".bin", std::ios::binary);
      f.read(host.data(), sizes[i]);
      CHECK_RT(cudaMemcpy(p, host.data(), sizes[i], cudaMemcpyHostToDevice));
    } else {
      CHECK_RT(cudaMemset(p, 0, sizes[i]));
    }
  }
  unsigned char* scratch = (unsigned char*)nvshmem_malloc(round_up(s.scratch ? s.scratch : 256));
  int32_t* pe_map = nullptr;
  CHECK_RT(cudaMalloc(&pe_map, s.pe_map.size() * sizeof(int32_t)));
  std::vector<int32_t> map32(s.pe_map.begin(), s.pe_map.end());
  CHECK_RT(cudaMemcpy(pe_map, map32.data(), map32.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  args.npes = (int32_t)s.pe_map.size();
  args.pe = -1;
  for (int k = 0; k < args.npes; ++k) if (s.pe_map[k] == nvshmem_my_pe()) args.pe = k;
  args.pe_map = pe_map;
  args.scratch = scratch;
  args.launch_id = 1;
  void* params[] = {&args};

  unsigned runs = s.iters ? s.iters + 1 : 1;
  float ms = 0;
  for (unsigned it = 0; it < runs; ++it) {
    CHECK_RT(cudaMemset(scratch, 0, round_up(s.scratch ? s.scratch : 256)));
    CHECK_RT(cudaDeviceSynchronize());
    nvshmem_barrier_all();
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaEventRecord(e0, 0);
    CHECK_CU(cuLaunchKernel(fn, s.grid[0], s.grid[1], s.grid[2], s.threads, 1, 1, s.smem, 0, params, nullptr));
    nvshmemx_quiet_on_stream(0);
    cudaEventRecord(e1, 0);
    CHECK_RT(cudaDeviceSynchronize());
    float t;
    cudaEventElapsedTime(&t, e0, e1);
    if (it > 0 || runs == 1) ms += t;
    nvshmem_barrier_all();
  }
  for (size_t j = 0; j < s.out_bytes.size(); ++j) {
    std::vector<char> host(s.out_bytes[j]);
    CHECK_RT(cudaMemcpy(host.data(), bufs[s.in_bytes.size() + j], host.size(), cudaMemcpyDeviceToHost));
    std::ofstream f(dir + "/out" + std::to_string(j) + ".r" + std::to_string(g_rank) + ".bin", std::ios::binary);
    f.write(host.data(), host.size());
  }
  printf("[rank %d] case %s ran: %.3f ms per launch (%u timed)\n", g_rank, name.c_str(), ms / (s.iters ? s.iters : 1),
         s.iters ? s.iters : 1);
  fflush(stdout);
  cudaFree(pe_map);
  nvshmem_free(scratch);
  for (auto it = bufs.rbegin(); it != bufs.rend(); ++it) nvshmem_free(*it);
  // NVSHMEM updates the device state of every registered module when the heap changes:
  // a module must be deregistered before it is unloaded.
  if (s.nvshmem && nvshmemx_cumodule_finalize(mod) != 0) { fprintf(stderr, "cumodule_finalize failed\n"); return 1; }
  CHECK_CU(cuModuleUnload(mod));
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 5) { fprintf(stderr, "usage: harness RANK NRANKS WORKDIR CASE...\n"); return 2; }
  g_rank = atoi(argv[1]);
  int nranks = atoi(argv[2]);
  std::string work = argv[3];
  CHECK_RT(cudaSetDevice(g_rank));
  CHECK_RT(cudaFree(0));
  nvshmemx_uniqueid_t uid;
  std::string uid_path = work + "/uid.bin";
  if (g_rank == 0) {
    nvshmemx_get_uniqueid(&uid);
    std::ofstream(uid_path + ".tmp", std::ios::binary).write((const char*)&uid, sizeof(uid));
    std::rename((uid_path + ".tmp").c_str(), uid_path.c_str());
  } else {
    for (int i = 0; i < 600; ++i) {
      std::ifstream f(uid_path, std::ios::binary);
      if (f && f.read((char*)&uid, sizeof(uid))) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  nvshmemx_init_attr_t attr = NVSHMEMX_INIT_ATTR_INITIALIZER;
  nvshmemx_set_attr_uniqueid_args(g_rank, nranks, &uid, &attr);
  if (nvshmemx_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID, &attr) != 0) { fprintf(stderr, "nvshmem init failed\n"); return 1; }
  int rc = 0;
  for (int i = 4; i < argc && rc == 0; ++i) rc = run_case(work + "/" + argv[i], argv[i]);
  nvshmem_finalize();
  return rc;
}
