"""HIP versions of the CUDA samples' ``Common/`` helpers that book and course code includes from the
CUDA toolkit (``-I$(CUDA_PATH)/samples/common/inc``): timers, error checks and command-line
parsing, written from their public interface. They go in ``OUT/hip_samples/``; the rule that
needs one adds that folder to the unit's include path, and the report says so."""

from __future__ import annotations

FOLDER = "hip_samples"
DOC = "CUDA samples' Common/ helpers (sdkCreateTimer, checkCudaErrors...): their interface, on HIP"

_TIMER = """\
// helper_timer.h for HIP, written by `hipbot port` (the CUDA samples' timer interface).
#pragma once
#include <chrono>

class StopWatchInterface {
 public:
  virtual ~StopWatchInterface() {}
  virtual void start() = 0;
  virtual void stop() = 0;
  virtual void reset() = 0;
  virtual float getTime() = 0;  // milliseconds
  virtual float getAverageTime() = 0;
};

class HipbotStopWatch : public StopWatchInterface {
  using clock = std::chrono::steady_clock;
  clock::time_point begin_;
  float total_ = 0.f;
  int sessions_ = 0;
  bool running_ = false;

 public:
  void start() override { begin_ = clock::now(); running_ = true; }
  void stop() override {
    if (!running_) return;
    total_ += std::chrono::duration<float, std::milli>(clock::now() - begin_).count();
    ++sessions_;
    running_ = false;
  }
  void reset() override {
    total_ = 0.f;
    sessions_ = 0;
    if (running_) begin_ = clock::now();
  }
  float getTime() override {
    float now = running_ ? std::chrono::duration<float, std::milli>(clock::now() - begin_).count() : 0.f;
    return total_ + now;
  }
  float getAverageTime() override { return sessions_ ? total_ / sessions_ : 0.f; }
};

inline bool sdkCreateTimer(StopWatchInterface** t) { *t = new HipbotStopWatch(); return true; }
inline bool sdkDeleteTimer(StopWatchInterface** t) { delete *t; *t = nullptr; return true; }
inline bool sdkStartTimer(StopWatchInterface** t) { if (*t) (*t)->start(); return true; }
inline bool sdkStopTimer(StopWatchInterface** t) { if (*t) (*t)->stop(); return true; }
inline bool sdkResetTimer(StopWatchInterface** t) { if (*t) (*t)->reset(); return true; }
inline float sdkGetTimerValue(StopWatchInterface** t) { return *t ? (*t)->getTime() : 0.f; }
inline float sdkGetAverageTimerValue(StopWatchInterface** t) { return *t ? (*t)->getAverageTime() : 0.f; }
"""

_STRING = """\
// helper_string.h for HIP, written by `hipbot port` (the CUDA samples' command-line helpers).
#pragma once
#include <cstdlib>
#include <cstring>

inline const char* hipbot_flag_value(int argc, const char** argv, const char* name) {
  size_t n = std::strlen(name);
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    while (*a == '-') ++a;
    if (std::strncmp(a, name, n) == 0 && (a[n] == '\\0' || a[n] == '=')) return a[n] == '=' ? a + n + 1 : a + n;
  }
  return nullptr;
}
inline bool checkCmdLineFlag(int argc, const char** argv, const char* name) {
  return hipbot_flag_value(argc, argv, name) != nullptr;
}
inline int getCmdLineArgumentInt(int argc, const char** argv, const char* name) {
  const char* v = hipbot_flag_value(argc, argv, name);
  return v && *v ? std::atoi(v) : 0;
}
inline float getCmdLineArgumentFloat(int argc, const char** argv, const char* name) {
  const char* v = hipbot_flag_value(argc, argv, name);
  return v && *v ? static_cast<float>(std::atof(v)) : 0.f;
}
inline bool getCmdLineArgumentString(int argc, const char** argv, const char* name, char** value) {
  const char* v = hipbot_flag_value(argc, argv, name);
  if (v && *v) *value = const_cast<char*>(v);
  return v && *v;
}
"""

_CUDA = """\
// helper_cuda.h for HIP, written by `hipbot port` (the CUDA samples' error checks).
#pragma once
#include <hip/hip_runtime.h>
#include <cstdio>
#include <cstdlib>
#include "helper_string.h"

inline const char* hipbot_error_text(hipError_t e) { return hipGetErrorString(e); }
template <typename T> inline const char* hipbot_error_text(T) { return "library error"; }

template <typename T>
inline void hipbot_check(T result, const char* what, const char* file, int line) {
  if (result) {
    std::fprintf(stderr, "error at %s:%d code=%d (%s) \\"%s\\"\\n", file, line, static_cast<int>(result),
                 hipbot_error_text(result), what);
    std::exit(EXIT_FAILURE);
  }
}
#define checkCudaErrors(val) hipbot_check((val), #val, __FILE__, __LINE__)

inline void hipbot_last_error(const char* msg, const char* file, int line) {
  hipError_t e = hipGetLastError();
  if (e != hipSuccess) {
    std::fprintf(stderr, "%s(%d): getLastCudaError() error: %s: %s\\n", file, line, msg, hipGetErrorString(e));
    std::exit(EXIT_FAILURE);
  }
}
#define getLastCudaError(msg) hipbot_last_error((msg), __FILE__, __LINE__)
#define printLastCudaError(msg) hipbot_last_error((msg), __FILE__, __LINE__)

inline int findCudaDevice(int argc, const char** argv) {
  int dev = checkCmdLineFlag(argc, argv, "device") ? getCmdLineArgumentInt(argc, argv, "device") : 0;
  checkCudaErrors(hipSetDevice(dev));
  return dev;
}
inline int gpuGetMaxGflopsDeviceId() { return 0; }
inline int _ConvertSMVer2Cores(int, int) { return 64; }  // an AMD compute unit has 64 lanes
"""

_FUNCTIONS = """\
// helper_functions.h for HIP, written by `hipbot port`.
#pragma once
#include "helper_string.h"
#include "helper_timer.h"
"""

HEADERS: dict[str, str] = {
    "helper_timer.h": _TIMER,
    "helper_string.h": _STRING,
    "helper_cuda.h": _CUDA,
    "helper_functions.h": _FUNCTIONS,
}

NVTX_NAME = "hip_nvtx.h"
NVTX_DOC = "NVTX markers are profiling annotations; roctx (roctracer) is ROCm's counterpart"
NVTX = """\
// hip_nvtx.h, written by `hipbot port`: NVTX markers as no-ops (roctracer's roctx is not installed;
// with it, roctxRangePush/roctxRangePop/roctxMark give the same markers to rocprof).
#pragma once
#include <cstdint>

#define NVTX_VERSION 3
#define NVTX_EVENT_ATTRIB_STRUCT_SIZE ((uint16_t)sizeof(nvtxEventAttributes_t))
#define NVTX_COLOR_ARGB 1
#define NVTX_MESSAGE_TYPE_ASCII 1
typedef uint64_t nvtxRangeId_t;
typedef struct nvtxEventAttributes_t {
  uint16_t version;
  uint16_t size;
  uint32_t category;
  int32_t colorType;
  uint32_t color;
  int32_t payloadType;
  int32_t reserved0;
  union { uint64_t ullValue; int64_t llValue; double dValue; } payload;
  int32_t messageType;
  union { const char* ascii; const wchar_t* unicode; } message;
} nvtxEventAttributes_t;

inline int nvtxRangePushA(const char*) { return 0; }
inline int nvtxRangePush(const char*) { return 0; }
inline int nvtxRangePushEx(const nvtxEventAttributes_t*) { return 0; }
inline int nvtxRangePop() { return 0; }
inline nvtxRangeId_t nvtxRangeStartA(const char*) { return 0; }
inline nvtxRangeId_t nvtxRangeStartEx(const nvtxEventAttributes_t*) { return 0; }
inline void nvtxRangeEnd(nvtxRangeId_t) {}
inline void nvtxMarkA(const char*) {}
inline void nvtxMarkEx(const nvtxEventAttributes_t*) {}
template <typename T> inline void nvtxNameCudaStreamA(T, const char*) {}
template <typename T> inline void nvtxNameCudaEventA(T, const char*) {}
inline void nvtxNameOsThreadA(uint32_t, const char*) {}
"""
