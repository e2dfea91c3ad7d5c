// trip_latency.cu: how long one process's store takes to reach another process's kernel on the same GPU
// (two PEs on one GPU under MPS, the harness of ../shared/notes/two_pes_one_gpu.md), with nothing of
// jax_tilescale in the way. Issue 14's 4 KiB two-PE row costs ~6.5 us per call more than a copy kernel;
// the kernel makes two one-way trips between the processes (the owner's publish, the put's signal).
// This prints what a trip costs by itself, in a resident kernel and across launches, at system and at
// GPU scope, so the row's floor is known (benchmarks/NOTES.md, issue 14, thirteenth session).
//
//   nvcc -O3 -arch=sm_90 -o /tmp/trip tools/proto/trip_latency.cu
//   (MPS running) mkdir -p /tmp/trip_files; /tmp/trip 1 & /tmp/trip 0; wait   # rank 0 prints the table
//   STEPS=trip_latency bash tools/gpu_test.sh            # the same, MPS started and stopped around it
//
// Each rank cudaMallocs a page of words and exports it with legacy CUDA IPC through a file in $TRIP_DIR
// (default /tmp/trip_files, which must exist).
// Words of a rank's page: [0] the peer's publish (a launch number), [1] the peer's signal, [64] this rank's
// own launch counter; bytes 8192.. a 4 KiB landing zone the peer writes into. Measured 2026-12-03 (NOTES):
// a trip 0.77 us at system scope; the protocol +2.2 us per launch in a chain, +2.3 per iteration in a loop.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#define CK(x)                                                                                        \
  do {                                                                                               \
    cudaError_t e_ = (x);                                                                            \
    if (e_ != cudaSuccess) {                                                                         \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));             \
      exit(1);                                                                                       \
    }                                                                                                \
  } while (0)

template <bool SYS>
__device__ __forceinline__ void st_release(uint64_t* p, uint64_t v) {
  if (SYS) asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
  else asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
template <bool SYS>
__device__ __forceinline__ uint64_t ld_acquire(const uint64_t* p) {
  uint64_t v;
  if (SYS) asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  else asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint64_t gtimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

// A: one resident thread per rank; rank 0 sets the peer's word to i and waits for its own word to read i,
// rank 1 the other way round: 2n one-way trips; rank 0 records the elapsed ns.
template <bool SYS>
__global__ void pingpong(uint64_t* mine, uint64_t* peer, int rank, int n, uint64_t base, uint64_t* ns) {
  const uint64_t t0 = gtimer();
  for (int i = 1; i <= n; ++i) {
    const uint64_t v = base + i;
    if (rank == 0) {
      st_release<SYS>(peer + 1, v);
      while (ld_acquire<SYS>(mine + 1) < v) {
      }
    } else {
      while (ld_acquire<SYS>(mine + 1) < v) {
      }
      st_release<SYS>(peer + 1, v);
    }
  }
  if (rank == 0) *ns = gtimer() - t0;
}

// B: one launch = what a call of the 4 KiB shift does between the processes. MODE 0: nothing (a launch
// floor; reads and advances the counter as every call does); 1: publish this launch's number to the peer
// and wait for the peer's (one trip each way, overlapped); 2: the signalled shift: publish, wait for the
// peer's publish, copy 4 KiB into the peer's landing zone, signal the peer, wait for the peer's signal.
template <int MODE, bool SYS>
__global__ void __launch_bounds__(128) call(uint64_t* mine, uint64_t* peer, const uint4* src) {
  const uint64_t seq = mine[64] + 1;
  if (MODE >= 1) {
    if (threadIdx.x == 0) {
      st_release<SYS>(peer + 0, seq);
      while (ld_acquire<SYS>(mine + 0) < seq) {
      }
    }
    __syncthreads();
  }
  if (MODE == 2) {
    uint4* dst = reinterpret_cast<uint4*>(reinterpret_cast<unsigned char*>(peer) + 8192);
    for (int k = threadIdx.x; k < 256; k += blockDim.x) dst[k] = src[k];
    __syncthreads();
    if (threadIdx.x == 0) {
      st_release<SYS>(peer + 1, seq);
      while (ld_acquire<SYS>(mine + 1) < seq) {
      }
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) mine[64] = seq;
}

// C: the loop of a jitted fori_loop as XLA records it with WHILE in its command buffers: a graph with a
// conditional while node whose body is the call, a copy of its result (the loop-carried buffer) and the
// counter's kernel, which sets the condition for the next iteration.
__global__ void copy4k(uint4* dst, const uint4* src) {
  for (int k = threadIdx.x; k < 256; k += blockDim.x) dst[k] = src[k];
}
__global__ void count_up(unsigned int* ctr, unsigned int n, cudaGraphConditionalHandle h) {
  const unsigned int c = *ctr + 1;
  *ctr = c < n ? c : 0u;
  cudaGraphSetConditional(h, c < n ? 1u : 0u);
}

static std::string dir = getenv("TRIP_DIR") ? getenv("TRIP_DIR") : "/tmp/trip_files";

static void put_file(const std::string& name, const void* data, size_t n) {
  std::ofstream(dir + "/" + name + ".tmp", std::ios::binary).write(static_cast<const char*>(data), n);
  std::rename((dir + "/" + name + ".tmp").c_str(), (dir + "/" + name).c_str());
}
static void get_file(const std::string& name, void* data, size_t n) {
  for (int tries = 0;; ++tries) {
    std::ifstream f(dir + "/" + name, std::ios::binary);
    if (f && f.read(static_cast<char*>(data), n)) return;
    if (tries > 60000) {
      fprintf(stderr, "no %s from the peer after 60 s\n", name.c_str());
      exit(1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}
static int meet_count = 0;
static void host_meet(int rank) {  // both ranks reach the same point (files), so neither runs ahead
  const std::string me = "meet" + std::to_string(rank) + "_" + std::to_string(meet_count);
  const std::string other = "meet" + std::to_string(1 - rank) + "_" + std::to_string(meet_count);
  ++meet_count;
  int one = 1;
  put_file(me, &one, sizeof one);
  get_file(other, &one, sizeof one);
}

struct Row {  // one line of the table: us per call at system and at GPU scope
  const char* what;
  double sys_us, gpu_us;
};

// One call kernel of the given mode and scope on stream s.
static void launch_call(int mode, bool sys, cudaStream_t s, uint64_t* mine, uint64_t* peer, const uint4* src) {
  if (mode == 0) sys ? call<0, true><<<1, 128, 0, s>>>(mine, peer, src) : call<0, false><<<1, 128, 0, s>>>(mine, peer, src);
  if (mode == 1) sys ? call<1, true><<<1, 128, 0, s>>>(mine, peer, src) : call<1, false><<<1, 128, 0, s>>>(mine, peer, src);
  if (mode == 2) sys ? call<2, true><<<1, 128, 0, s>>>(mine, peer, src) : call<2, false><<<1, 128, 0, s>>>(mine, peer, src);
}

// Adds a while node to g and returns its body graph; *handle is the node's condition, for count_up.
static cudaGraph_t while_body(cudaGraph_t g, cudaGraphConditionalHandle* handle) {
  CK(cudaGraphConditionalHandleCreate(handle, g, 1, cudaGraphCondAssignDefault));
  cudaGraphNodeParams cp = {};
  cp.type = cudaGraphNodeTypeConditional;
  cp.conditional.handle = *handle;
  cp.conditional.type = cudaGraphCondTypeWhile;
  cp.conditional.size = 1;
  cudaGraphNode_t node;
  CK(cudaGraphAddNode(&node, g, nullptr, nullptr, 0, &cp));
  return cp.conditional.phGraph_out[0];
}

// Instantiates g, warms it up, then times 9 reps of `launches` graph launches: the median us per call
// (`calls` calls per graph launch).
static double median_us(cudaGraph_t g, cudaStream_t s, int launches, int calls) {
  cudaGraphExec_t ge;
  CK(cudaGraphInstantiate(&ge, g, 0));
  for (int w = 0; w < 3; ++w) CK(cudaGraphLaunch(ge, s));
  CK(cudaStreamSynchronize(s));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<double> reps;
  for (int r = 0; r < 9; ++r) {
    CK(cudaEventRecord(e0, s));
    for (int k = 0; k < launches; ++k) CK(cudaGraphLaunch(ge, s));
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    reps.push_back(ms * 1000.0 / (launches * calls));
  }
  std::sort(reps.begin(), reps.end());
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  CK(cudaGraphExecDestroy(ge));
  return reps[4];
}

int main(int argc, char** argv) {
  const int rank = argc > 1 ? atoi(argv[1]) : 0;
  CK(cudaSetDevice(0));
  uint64_t* mine;
  CK(cudaMalloc(&mine, 1 << 16));
  CK(cudaMemset(mine, 0, 1 << 16));
  uint4* src;
  CK(cudaMalloc(&src, 4096));
  CK(cudaMemset(src, 1, 4096));
  uint64_t* ns;
  CK(cudaMalloc(&ns, 8));
  cudaIpcMemHandle_t h;
  CK(cudaIpcGetMemHandle(&h, mine));
  put_file("h" + std::to_string(rank), &h, sizeof h);
  cudaIpcMemHandle_t hp;
  get_file("h" + std::to_string(1 - rank), &hp, sizeof hp);
  uint64_t* peer;
  CK(cudaIpcOpenMemHandle(reinterpret_cast<void**>(&peer), hp, cudaIpcMemLazyEnablePeerAccess));
  CK(cudaDeviceSynchronize());
  host_meet(rank);
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  // A: resident ping-pong.
  uint64_t base = 0;
  double trip_sys = 0, trip_gpu = 0;
  for (int scope = 0; scope < 2; ++scope) {
    const int n = 20000;
    for (int rep = 0; rep < 3; ++rep) {
      if (scope == 0) pingpong<true><<<1, 1, 0, s>>>(mine, peer, rank, n, base, ns);
      else pingpong<false><<<1, 1, 0, s>>>(mine, peer, rank, n, base, ns);
      base += n;
      CK(cudaStreamSynchronize(s));
      uint64_t t = 0;
      CK(cudaMemcpy(&t, ns, 8, cudaMemcpyDeviceToHost));
      const double trip = t / (2.0 * n);
      (scope == 0 ? trip_sys : trip_gpu) = rep == 0 ? trip : std::min(scope == 0 ? trip_sys : trip_gpu, trip);
    }
    host_meet(rank);
  }

  // B: chains of 50 launches recorded as one CUDA graph, 20 graph launches a rep; C: loops of 500
  // iterations in one graph (a while node), one graph launch a rep. us per launch or iteration, median of 9.
  unsigned int* ctr;
  CK(cudaMalloc(&ctr, 4));
  CK(cudaMemset(ctr, 0, 4));
  uint4* carried;
  CK(cudaMalloc(&carried, 4096));
  const char* names[3] = {"launch only (counter)", "publish + wait for the peer's", "4 KiB signalled shift"};
  // loop 2: XLA's shape of the same loop (its command buffers): the call in a child graph (a traced custom
  // call), the loop-carried copy as a memcpy node (XLA's `copy`), then the counter.
  std::vector<Row> rows, loop_rows, xla_rows;
  for (int loop = 0; loop < 3; ++loop) {
    for (int mode = 0; mode < 3; ++mode) {
      double us[2];
      for (int scope = 0; scope < 2; ++scope) {
        const bool sys = scope == 0;
        cudaGraph_t g;
        CK(cudaGraphCreate(&g, 0));
        if (loop == 0) {
          CK(cudaStreamBeginCaptureToGraph(s, g, nullptr, nullptr, 0, cudaStreamCaptureModeThreadLocal));
          for (int k = 0; k < 50; ++k) launch_call(mode, sys, s, mine, peer, src);
          CK(cudaStreamEndCapture(s, &g));
        } else if (loop == 2) {
          cudaGraphConditionalHandle cond;
          cudaGraph_t body = while_body(g, &cond), child;
          CK(cudaGraphCreate(&child, 0));
          CK(cudaStreamBeginCaptureToGraph(s, child, nullptr, nullptr, 0, cudaStreamCaptureModeThreadLocal));
          launch_call(mode, sys, s, mine, peer, src);
          CK(cudaStreamEndCapture(s, &child));
          cudaGraphNode_t call_node, copy_node;
          CK(cudaGraphAddChildGraphNode(&call_node, body, nullptr, 0, child));
          CK(cudaGraphAddMemcpyNode1D(&copy_node, body, &call_node, 1, carried,
                                      reinterpret_cast<unsigned char*>(mine) + 8192, 4096, cudaMemcpyDeviceToDevice));
          CK(cudaStreamBeginCaptureToGraph(s, body, &copy_node, nullptr, 1, cudaStreamCaptureModeThreadLocal));
          count_up<<<1, 1, 0, s>>>(ctr, 500, cond);
          CK(cudaStreamEndCapture(s, &body));
          CK(cudaGraphDestroy(child));
        } else {
          cudaGraphConditionalHandle cond;
          cudaGraph_t body = while_body(g, &cond);
          CK(cudaStreamBeginCaptureToGraph(s, body, nullptr, nullptr, 0, cudaStreamCaptureModeThreadLocal));
          launch_call(mode, sys, s, mine, peer, src);
          copy4k<<<1, 128, 0, s>>>(carried, src);
          count_up<<<1, 1, 0, s>>>(ctr, 500, cond);
          CK(cudaStreamEndCapture(s, &body));
        }
        host_meet(rank);
        us[scope] = median_us(g, s, loop == 0 ? 20 : 1, loop == 0 ? 50 : 500);
        CK(cudaGraphDestroy(g));
        host_meet(rank);
      }
      (loop == 0 ? rows : loop == 1 ? loop_rows : xla_rows).push_back({names[mode], us[0], us[1]});
    }
  }
  if (rank == 0) {
    printf("one-way trip between two processes on one GPU, resident ping-pong: sys %.3f us, gpu %.3f us\n",
           trip_sys / 1000.0, trip_gpu / 1000.0);
    printf("%-34s %10s %10s\n", "chain of 50 launches (us/launch)", "sys", "gpu");
    for (const Row& r : rows) printf("%-34s %10.2f %10.2f\n", r.what, r.sys_us, r.gpu_us);
    printf("%-34s %10s %10s\n", "while-node loop, + copy + counter", "sys", "gpu");
    for (const Row& r : loop_rows) printf("%-34s %10.2f %10.2f\n", r.what, r.sys_us, r.gpu_us);
    printf("%-34s %10s %10s\n", "the same, XLA's shape (child, memcpy)", "sys", "gpu");
    for (const Row& r : xla_rows) printf("%-34s %10.2f %10.2f\n", r.what, r.sys_us, r.gpu_us);
  }
  CK(cudaIpcCloseMemHandle(peer));
  return 0;
}
