/* A CPU emulation of the CUDA execution model, for testing kernels_cuda/ without a GPU.
 *
 * Force-included (g++ -include cuda_emu.h -x c++) in front of a .cu file, it supplies the
 * CUDA built-ins the sapporo kernels use, with the semantics a kernel may rely on and
 * checks for the rules a GPU does not check:
 *
 *  - Every CUDA thread of a block is a fiber (ucontext) with its own stack; a block runs
 *    to completion before the next one starts. A fiber runs until it reaches a barrier
 *    (__syncthreads, a warp shuffle or vote, __syncwarp) or returns; the scheduler then runs the
 *    next fiber. The order in which the fibers of one round run, and the blocks of a grid,
 *    is a schedule: forward, reverse or shuffled (cuemu_set_schedule), so a missing barrier
 *    or two blocks writing one place shows up as a wrong result under one schedule or
 *    another instead of passing by luck.
 *  - __syncthreads is released only when every thread of the block waits at it; a thread
 *    that returned while others wait is reported (undefined on a GPU, a hang or garbage).
 *  - A warp shuffle or vote (__any_sync) is released when every lane named in its mask
 *    waits at the same operation with the same mask; the caller must be in the mask, every
 *    lane of the mask must exist, and a shuffle's source lane must be in the mask. Values
 *    are exchanged all at once, as in hardware.
 *  - __shared__ variables are block-wide statics in one ELF section; the section is filled
 *    with 0xff bytes (NaN for floating point, -1 for integers) before every block, so a read
 *    of shared memory no thread of this block wrote is garbage, as on a GPU.
 *  - A violated rule ends the launch with a message (cuemu_error); nothing aborts the
 *    process.
 *
 * Arithmetic is the host's IEEE arithmetic (compile with -ffp-contract=off); rsqrtf is
 * 1/sqrtf (the GPU's is approximate to 2 ulp). Timing, memory coherence between blocks,
 * occupancy and the real instruction set are out of scope: this is for logic, not speed.
 */
#ifndef SAPPORO_CUDA_EMU_H
#define SAPPORO_CUDA_EMU_H

#include <ucontext.h>

#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

/* ------------------------------------------------------------------ qualifiers */
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __shared__ __attribute__((section("cuemu_shared"))) static

/* ------------------------------------------------------------------ vector types */
struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x, y, z;
};
struct __attribute__((aligned(8))) float2 {
    float x, y;
};
struct __attribute__((aligned(16))) float4 {
    float x, y, z, w;
};
struct __attribute__((aligned(16))) double2 {
    double x, y;
};
struct __attribute__((aligned(16))) double4 { /* CUDA < 13 layout: 16-byte aligned */
    double x, y, z, w;
};
struct __attribute__((aligned(32))) double4_32a {
    double x, y, z, w;
};
struct __attribute__((aligned(16))) int4 {
    int x, y, z, w;
};
static inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
static inline double4 make_double4(double x, double y, double z, double w)
{
    return {x, y, z, w};
}
static inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }

/* ------------------------------------------------------------------ arithmetic */
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dsub_rn(double a, double b) { return a - b; }
/* CUDA's bit reinterpretations, all one copy through memcpy */
template <typename To, typename From>
static inline To cuemu_bits(From v)
{
    static_assert(sizeof(To) == sizeof(From), "reinterpretation between sizes");
    To out;
    std::memcpy(&out, &v, sizeof out);
    return out;
}
static inline float __int_as_float(int i) { return cuemu_bits<float>(i); }
static inline int __float_as_int(float f) { return cuemu_bits<int>(f); }
static inline float __uint_as_float(unsigned int i) { return cuemu_bits<float>(i); }
static inline unsigned int __float_as_uint(float f) { return cuemu_bits<unsigned int>(f); }
static inline double __longlong_as_double(long long i) { return cuemu_bits<double>(i); }
static inline long long __double_as_longlong(double d) { return cuemu_bits<long long>(d); }
using std::sqrt;

/* ------------------------------------------------------------------ the emulator */
namespace cuemu {

enum class State { running, at_syncthreads, at_warp, done };
enum class Shfl { sync, idx, up, down, bfly, any };

struct Fiber {
    ucontext_t ctx;
    uint3 tid;
    int flat, warp, lane;
    State state;
    unsigned mask;     /* warp operations: the mask given */
    Shfl op;           /* which warp operation */
    int arg, width;    /* its lane argument and width */
    uint64_t send, recv;
};

struct Launch {
    dim3 grid, block;
    uint3 bid;
    int nthreads;
    std::vector<Fiber> fibers;
    std::vector<char> stacks;
    size_t stack_size;
    ucontext_t sched;
    std::function<void()> body;
    std::string error;
};

inline thread_local Launch *L = nullptr;
inline thread_local Fiber *F = nullptr;
/* __shared__ variables are statics of this library: one launch at a time, whichever
 * thread (the fake PyCUDA's, the native engine's through the emulated driver) makes it */
inline std::mutex launch_mutex;
inline int schedule_mode = 0; /* 0 forward, 1 reverse, 2 shuffled */
inline unsigned schedule_seed = 1;
inline thread_local std::string last_error;

/* End the launch with a message: the scheduler resumes no fiber after this. */
[[gnu::format(printf, 1, 2)]] inline void fail(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (L->error.empty()) {
        char where[128];
        std::snprintf(where, sizeof where, " (block %u,%u,%u thread %u,%u,%u)", L->bid.x,
                      L->bid.y, L->bid.z, F->tid.x, F->tid.y, F->tid.z);
        L->error = std::string(buf) + where;
    }
    for (;;) swapcontext(&F->ctx, &L->sched);
}

inline void yield() { swapcontext(&F->ctx, &L->sched); }

inline void entry()
{
    L->body();
    F->state = State::done;
    /* returning resumes uc_link, the scheduler */
}

inline uint64_t warp_op(unsigned mask, uint64_t value, Shfl op, int arg, int width)
{
    if (!(mask >> F->lane & 1u))
        fail("warp operation with mask %#x that leaves out the calling lane %d", mask, F->lane);
    if (width < 1 || width > 32 || (width & (width - 1)))
        fail("warp operation with width %d (must be a power of two up to 32)", width);
    F->state = State::at_warp;
    F->mask = mask;
    F->op = op;
    F->arg = arg;
    F->width = width;
    F->send = value;
    yield();
    return F->recv;
}

/* Source lane of a shuffle (CUDA's rules; the caller's own lane when out of its segment). */
inline int source_lane(const Fiber &f)
{
    const int seg = f.lane & ~(f.width - 1);
    switch (f.op) {
    case Shfl::idx: return seg + (f.arg & (f.width - 1));
    case Shfl::up: return (f.lane - f.arg < seg) ? f.lane : f.lane - f.arg;
    case Shfl::down: return (f.lane + f.arg >= seg + f.width) ? f.lane : f.lane + f.arg;
    case Shfl::bfly: {
        const int s = f.lane ^ f.arg;
        return (s >= seg + f.width) ? f.lane : s;
    }
    default: return f.lane;
    }
}

inline const char *state_name(State s)
{
    switch (s) {
    case State::running: return "running";
    case State::at_syncthreads: return "__syncthreads";
    case State::at_warp: return "a warp operation";
    default: return "returned";
    }
}

inline std::string hex(unsigned v)
{
    char buf[16];
    std::snprintf(buf, sizeof buf, "%#x", v);
    return buf;
}

/* Release what can be released; false when nothing can (a deadlock: reported). */
inline bool release()
{
    Launch &l = *L;
    bool any = false;
    const int nwarps = (l.nthreads + 31) / 32;
    for (int w = 0; w < nwarps; w++) {
        const int base = w * 32;
        const int lanes = std::min(32, l.nthreads - base);
        for (int ln = 0; ln < lanes; ln++) {
            Fiber &f = l.fibers[base + ln];
            if (f.state != State::at_warp) continue;
            const unsigned mask = f.mask;
            if (lanes < 32 && (mask >> lanes) != 0) {
                L->error = "warp operation with mask " + hex(mask) +
                           " naming lanes that do not exist in warp " + std::to_string(w);
                return false;
            }
            bool ready = true;
            for (int q = 0; q < lanes && ready; q++) {
                if (!(mask >> q & 1u)) continue;
                const Fiber &g = l.fibers[base + q];
                ready = g.state == State::at_warp && g.mask == mask;
            }
            if (!ready) continue;
            uint64_t vote = 0; /* __any_sync: whether any lane of the mask sent non-zero */
            for (int q = 0; q < lanes; q++) {
                if (mask >> q & 1u) vote |= l.fibers[base + q].send != 0;
            }
            for (int q = 0; q < lanes; q++) {
                if (!(mask >> q & 1u)) continue;
                Fiber &g = l.fibers[base + q];
                if (g.op != f.op) {
                    L->error = "lanes of one warp mask at different warp operations";
                    return false;
                }
                const int src = source_lane(g);
                if (g.op != Shfl::sync && !(mask >> src & 1u)) {
                    L->error = "shuffle in warp " + std::to_string(w) + ": lane " +
                               std::to_string(q) + " reads lane " + std::to_string(src) +
                               ", which is not in the mask";
                    return false;
                }
                g.recv = g.op == Shfl::any ? vote : l.fibers[base + src].send;
            }
            for (int q = 0; q < lanes; q++) {
                if (mask >> q & 1u) l.fibers[base + q].state = State::running;
            }
            any = true;
        }
    }
    if (any) return true;
    int waiting = 0, done = 0;
    for (const Fiber &f : l.fibers) {
        waiting += f.state == State::at_syncthreads;
        done += f.state == State::done;
    }
    if (waiting > 0 && waiting + done == l.nthreads) {
        if (done > 0) {
            L->error = "__syncthreads reached by " + std::to_string(waiting) + " of " +
                       std::to_string(l.nthreads) + " threads; the others returned";
            return false;
        }
        for (Fiber &f : l.fibers) f.state = State::running;
        return true;
    }
    std::string msg = "deadlock: ";
    for (const Fiber &f : l.fibers) {
        if (f.state == State::done) continue;
        msg += "thread " + std::to_string(f.flat) + " waits at " + state_name(f.state);
        if (f.state == State::at_warp) msg += " (mask " + hex(f.mask) + ")";
        msg += "; ";
        if (msg.size() > 400) break;
    }
    L->error = msg;
    return false;
}

extern "C" {
extern char __start_cuemu_shared[] __attribute__((weak, visibility("hidden")));
extern char __stop_cuemu_shared[] __attribute__((weak, visibility("hidden")));
}

inline void run_block(std::vector<int> &order, std::mt19937 &rng)
{
    Launch &l = *L;
    if (__start_cuemu_shared != nullptr)
        std::memset(__start_cuemu_shared, 0xff,
                    (size_t)(__stop_cuemu_shared - __start_cuemu_shared));
    for (int k = 0; k < l.nthreads; k++) {
        Fiber &f = l.fibers[k];
        f.flat = k;
        f.tid = {(unsigned)(k % l.block.x), (unsigned)(k / l.block.x % l.block.y),
                 (unsigned)(k / (l.block.x * l.block.y))};
        f.warp = k / 32;
        f.lane = k % 32;
        f.state = State::running;
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = l.stacks.data() + (size_t)k * l.stack_size;
        f.ctx.uc_stack.ss_size = l.stack_size;
        f.ctx.uc_link = &l.sched;
        makecontext(&f.ctx, entry, 0);
    }
    for (;;) {
        if (schedule_mode == 2) std::shuffle(order.begin(), order.end(), rng);
        for (int k : order) {
            Fiber &f = l.fibers[k];
            if (f.state != State::running) continue;
            F = &f;
            swapcontext(&l.sched, &f.ctx);
            if (!l.error.empty()) return;
        }
        bool all_done = true;
        for (const Fiber &f : l.fibers) all_done = all_done && f.state == State::done;
        if (all_done) return;
        if (!release()) return;
    }
}

/* Run body() as every thread of every block of the grid; 0 on success, else -1 and the
 * message in last_error. */
inline int launch(const unsigned *grid, const unsigned *block, std::function<void()> body)
{
    std::lock_guard<std::mutex> hold(launch_mutex);
    Launch l;
    l.grid = {grid[0], grid[1], grid[2]};
    l.block = {block[0], block[1], block[2]};
    const long long nthreads = (long long)block[0] * block[1] * block[2];
    if (nthreads < 1 || nthreads > 1024 || grid[0] < 1 || grid[1] < 1 || grid[2] < 1) {
        last_error = "invalid launch configuration: grid " + std::to_string(grid[0]) + "x" +
                     std::to_string(grid[1]) + "x" + std::to_string(grid[2]) + ", block " +
                     std::to_string(block[0]) + "x" + std::to_string(block[1]) + "x" +
                     std::to_string(block[2]);
        return -1;
    }
    l.nthreads = (int)nthreads;
    l.fibers.resize(l.nthreads);
    l.stack_size = 64 * 1024;
    l.stacks.resize(l.stack_size * l.nthreads);
    l.body = std::move(body);
    std::vector<int> order(l.nthreads);
    for (int k = 0; k < l.nthreads; k++)
        order[k] = schedule_mode == 1 ? l.nthreads - 1 - k : k;
    std::mt19937 rng(schedule_seed);
    Launch *saved_l = L;
    Fiber *saved_f = F;
    L = &l;
    /* the blocks run in the schedule's order too (forward, reverse or shuffled), so that a
     * result that depends on which block writes last shows up */
    std::vector<uint3> blocks;
    blocks.reserve((size_t)l.grid.x * l.grid.y * l.grid.z);
    for (unsigned z = 0; z < l.grid.z; z++)
        for (unsigned y = 0; y < l.grid.y; y++)
            for (unsigned x = 0; x < l.grid.x; x++)
                blocks.push_back({x, y, z});
    if (schedule_mode == 1) std::reverse(blocks.begin(), blocks.end());
    if (schedule_mode == 2) std::shuffle(blocks.begin(), blocks.end(), rng);
    for (size_t b = 0; b < blocks.size() && l.error.empty(); b++) {
        l.bid = blocks[b];
        run_block(order, rng);
    }
    L = saved_l;
    F = saved_f;
    if (!l.error.empty()) {
        last_error = l.error;
        return -1;
    }
    return 0;
}

/* Argument kinds in PyCUDA's struct letters: P pointer, i int, I unsigned, d double,
 * f float, ? anything else. */
template <typename T>
constexpr char kind()
{
    if constexpr (std::is_pointer_v<T>) return 'P';
    else if constexpr (std::is_same_v<T, int>) return 'i';
    else if constexpr (std::is_same_v<T, unsigned>) return 'I';
    else if constexpr (std::is_same_v<T, double>) return 'd';
    else if constexpr (std::is_same_v<T, float>) return 'f';
    else return '?';
}

template <typename... A>
const char *signature(void (*)(A...))
{
    static const char sig[] = {kind<A>()..., '\0'};
    return sig;
}

template <typename... A, size_t... I>
void call(void (*fn)(A...), void **args, std::index_sequence<I...>)
{
    fn(*static_cast<std::remove_cv_t<A> *>(args[I])...);
}

/* Launch kernel fn with arguments given as pointers to their values (cuLaunchKernel's
 * kernelParams). */
template <typename... A>
int launch_kernel(void (*fn)(A...), const unsigned *grid, const unsigned *block, void **args)
{
    return launch(grid, block, [fn, args] { call(fn, args, std::index_sequence_for<A...>{}); });
}

}  // namespace cuemu

/* ------------------------------------------------------------------ built-ins */
#define threadIdx (::cuemu::F->tid)
#define blockIdx (::cuemu::L->bid)
#define blockDim (::cuemu::L->block)
#define gridDim (::cuemu::L->grid)
#define warpSize 32

static inline void __syncthreads()
{
    cuemu::F->state = cuemu::State::at_syncthreads;
    cuemu::yield();
}

static inline void __syncwarp(unsigned mask = 0xffffffffu)
{
    cuemu::warp_op(mask, 0, cuemu::Shfl::sync, 0, 32);
}

template <typename T>
static inline T cuemu_shfl(unsigned mask, T v, cuemu::Shfl op, int arg, int width)
{
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "shuffle of a scalar");
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof v);
    bits = cuemu::warp_op(mask, bits, op, arg, width);
    T out;
    std::memcpy(&out, &bits, sizeof out);
    return out;
}

template <typename T>
static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32)
{
    return cuemu_shfl(mask, v, cuemu::Shfl::idx, src, width);
}
template <typename T>
static inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32)
{
    return cuemu_shfl(mask, v, cuemu::Shfl::up, (int)delta, width);
}
template <typename T>
static inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32)
{
    return cuemu_shfl(mask, v, cuemu::Shfl::down, (int)delta, width);
}
template <typename T>
static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32)
{
    return cuemu_shfl(mask, v, cuemu::Shfl::bfly, lane_mask, width);
}

static inline int __any_sync(unsigned mask, int predicate)
{
    return (int)cuemu::warp_op(mask, predicate != 0, cuemu::Shfl::any, 0, 32);
}

/* Fibers of one launch run one at a time: a plain read-modify-write is atomic. */
template <typename T>
static inline T atomicAdd(T *p, T v)
{
    T old = *p;
    *p = old + v;
    return old;
}

/* C entry points of a compiled module (the kernels' own launchers follow the source). */
extern "C" {
__attribute__((visibility("default"))) const char *cuemu_last_error()
{
    return cuemu::last_error.c_str();
}
__attribute__((visibility("default"))) void cuemu_set_schedule(int mode, unsigned seed)
{
    cuemu::schedule_mode = mode;
    cuemu::schedule_seed = seed;
}
}

#endif
