"""The translator library: expected HIP text for each rule (tokens, includes, launches, options)."""

from __future__ import annotations

import pytest

from hipbot.agents.hipify.cpp_tokens import COMMENT, INCLUDE, NUMBER, PUNCT, STRING, tokenize
from hipbot.agents.hipify.translate import HipifyOptions, translate


def hip(src: str, **opts) -> str:
    return translate(src, HipifyOptions(lint=False, **opts)).text


def test_tokens_keep_offsets_and_know_literals() -> None:
    src = '#include <cuda.h>\nauto s = R"x(a "b" )x" "c\\"d" /* cudaMalloc */ 1.5e+3f x<<<1, 2>>>();\n'
    toks = list(tokenize(src))
    assert [t.text for t in toks if t.kind == STRING] == ['R"x(a "b" )x"', '"c\\"d"']
    assert [t.kind for t in toks[:1]] == [INCLUDE]
    assert any(t.kind == COMMENT and "cudaMalloc" in t.text for t in toks)
    assert [t.text for t in toks if t.kind == NUMBER] == ["1.5e+3f", "1", "2"]
    assert "<<<" in [t.text for t in toks if t.kind == PUNCT] and ">>>" in [t.text for t in toks]
    assert all(src[t.start : t.end] == t.text for t in toks)


def test_identifiers_are_whole_tokens_comments_untouched() -> None:
    src = (
        "#include <cuda_runtime.h>\n"
        "// cudaMalloc stays in comments\n"
        "int cudaMallocX = 0; /* cudaFree */\n"
        "cudaError_t e = cudaMalloc(&p, n); cudaFree(p);\n"
    )
    out = hip(src)
    assert out == (
        "#include <hip/hip_runtime.h>\n"
        "// cudaMalloc stays in comments\n"
        "int cudaMallocX = 0; /* cudaFree */\n"
        "hipError_t e = hipMalloc(&p, n); hipFree(p);\n"
    )


def test_strings_only_exact_api_words_and_keep_strings_option() -> None:
    src = 'printf("cudaMalloc failed: cudaMallocX cudaFree\\n");\n'
    assert hip(src, insert_runtime_header=False) == 'printf("hipMalloc failed: cudaMallocX cudaFree\\n");\n'
    assert hip(src, insert_runtime_header=False, translate_strings=False) == src


def test_macros_and_preprocessor_lines_are_translated() -> None:
    src = (
        "#include <cuda.h>\n"
        "#define CHECK(x) do { cudaError_t err = (x); if (err != cudaSuccess) \\\n"
        '  printf("%s", cudaGetErrorString(err)); } while (0)\n'
        "#ifdef __CUDACC__\n#endif\n"
    )
    out = hip(src)
    assert 'hipError_t err = (x); if (err != hipSuccess) \\\n  printf("%s", hipGetErrorString(err));' in out
    assert "#ifdef __HIPCC__" in out


def test_includes_rewritten_deduplicated_and_runtime_inserted() -> None:
    src = (
        '#include <cuda.h>\n#include <cuda_runtime.h>\n#include "cublas_v2.h"\n'
        "#include <curand_kernel.h>\n#include <curand_normal.h>\n#include <device_launch_parameters.h>\n"
        "#include <cuComplex.h>\n#include <cufft.h>\n#include <stdio.h>\n"
    )
    assert hip(src) == (
        '#include <hip/hip_runtime.h>\n\n#include "hipblas.h"\n'
        "#include <hiprand/hiprand_kernel.h>\n\n\n"
        "#include <hip/hip_complex.h>\n#include <hipfft/hipfft.h>\n#include <stdio.h>\n"
    )
    assert (
        hip('#include "cublas_v2.h"\n', roc=True) == '\n#include <hip/hip_runtime.h>\n#include "rocblas.h"\n'
    )
    assert hip("#include <cudnn.h>\n", miopen=True).endswith("#include <miopen/miopen.h>\n")
    # no CUDA main header: hip_runtime.h goes before the first include, or on top
    assert hip("#include <stdio.h>\n__global__ void k() {}\n").startswith(
        "\n#include <hip/hip_runtime.h>\n#include <stdio.h>"
    )
    assert hip("__global__ void k() {}\n") == "\n#include <hip/hip_runtime.h>\n__global__ void k() {}\n"
    # include guards and pragma once keep the header inside
    guarded = "#ifndef K_H\n#define K_H\n__global__ void k();\n#endif\n"
    assert (
        hip(guarded)
        == "#ifndef K_H\n#include <hip/hip_runtime.h>\n\n#define K_H\n__global__ void k();\n#endif\n"
    )
    assert hip("#pragma once\nint x;\n") == "#pragma once\n#include <hip/hip_runtime.h>\n\nint x;\n"


def test_library_names_hip_roc_and_miopen() -> None:
    src = "cublasHandle_t h; cublasCreate(&h); cublasSgemm(h, a, b); curand_init(1, 2, 3, &s);\n"
    assert hip(src, insert_runtime_header=False) == (
        "hipblasHandle_t h; hipblasCreate(&h); hipblasSgemm(h, a, b); hiprand_init(1, 2, 3, &s);\n"
    )
    assert hip(src, insert_runtime_header=False, roc=True) == (
        "rocblas_handle h; rocblas_create_handle(&h); rocblas_sgemm(h, a, b); rocrand_init(1, 2, 3, &s);\n"
    )
    assert hip("cudnnHandle_t h; cudnnCreate(&h);\n", insert_runtime_header=False, miopen=True) == (
        "miopenHandle_t h; miopenCreate(&h);\n"
    )


def test_unsupported_and_experimental_left_and_reported() -> None:
    src = "cudaStream_t s;\ncudaLaunchAttributeValue v;\nint n = cublasCgemm_64(h);\n"
    result = translate(src, HipifyOptions(lint=False, insert_runtime_header=False))
    assert result.text.startswith("hipStream_t s;\n")
    reasons = {u.name: (u.reason, u.line, u.col) for u in result.report.unconverted}
    assert reasons["cublasCgemm_64"] == ("experimental", 3, 9)
    assert "cublasCgemm_64" in result.text
    assert "hipblasCgemm_v2_64" in hip(src, insert_runtime_header=False, experimental=True)
    report = result.report.to_dict()
    assert report["converted_by_name"]["cudaStream_t"] == 1
    assert report["converted_by_api"]["CUDA RT API"] >= 1
    assert {u["name"] for u in report["unconverted"]} >= {"cublasCgemm_64"}


def test_call_argument_rewrites_like_hipify_clang() -> None:
    src = (
        "cudaMemcpyToSymbol(coef, h, 20);\ncudaMemcpyFromSymbol(h, coef, 20);\n"
        "cudaEventCreate(&e);\ncudaEventCreate(&e, cudaEventBlockingSync);\n"
        "cudaMallocHost(&p, n);\n"
        "cuOccupancyMaxPotentialBlockSizeWithFlags(v, v2, f, b2d, bytes, lim, flags);\n"
    )
    assert hip(src, insert_runtime_header=False) == (
        "hipMemcpyToSymbol(HIP_SYMBOL(coef), h, 20);\nhipMemcpyFromSymbol(h, HIP_SYMBOL(coef), 20);\n"
        "hipEventCreate(&e);\nhipEventCreateWithFlags(&e, hipEventBlockingSync);\n"
        "hipHostMalloc(&p, n, hipHostMallocDefault);\n"
        "hipModuleOccupancyMaxPotentialBlockSizeWithFlags(v, v2, f, bytes, lim, flags);\n"
    )


def test_kernel_launch_kept_by_default_and_rewritten_on_request() -> None:
    src = (
        "template <typename T> __global__ void axpy(T a, T *x) {}\n"
        "__global__ void k(int n) {}\n"
        "void f(cudaStream_t s) {\n"
        "  k<<<g, b>>>(n);\n"
        "  axpy<float><<<dim3(1), 4, N*N, s>>>(a, cudaFoo(x));\n"
        "  axpy<<<1, std::min(a, b)>>>(a, x);\n"
        "  k<<<1, 2, 0>>> ( );\n"
        "}\n"
    )
    assert "k<<<g, b>>>(n);" in hip(src)
    out = hip(src, hip_kernel_execution_syntax=True)
    assert "  hipLaunchKernelGGL(k, dim3(g), dim3(b), 0, 0, n);\n" in out
    assert "hipLaunchKernelGGL(HIP_KERNEL_NAME(axpy<float>), dim3(1), dim3(4), N*N, s, a, cudaFoo(x));" in out
    assert "hipLaunchKernelGGL(HIP_KERNEL_NAME(axpy), dim3(1), dim3(std::min(a, b)), 0, 0, a, x);" in out
    assert "hipLaunchKernelGGL(k, dim3(1), dim3(2), 0, 0);" in out
    assert "void f(hipStream_t s)" in out


def test_kernel_launch_inside_macro_and_translated_arguments() -> None:
    src = "#define LAUNCH(n) kern<<<n, 256, 0, stream>>>(cudaMemcpyHostToDevice)\n"
    out = hip(src, hip_kernel_execution_syntax=True, insert_runtime_header=False)
    assert (
        out
        == "#define LAUNCH(n) hipLaunchKernelGGL(kern, dim3(n), dim3(256), 0, stream, hipMemcpyHostToDevice)\n"
    )


@pytest.mark.parametrize(
    "bad",
    ["k<<<1, 2(x);\n", "k<<<1, 2>>>;\n", "k<<<1>>>(x);\n"],
)
def test_unbalanced_launch_is_a_reported_error_and_text_kept(bad: str) -> None:
    result = translate(
        bad, HipifyOptions(lint=False, insert_runtime_header=False, hip_kernel_execution_syntax=True)
    )
    assert not result.ok
    assert result.report.errors and ":1:" in result.report.errors[0]
    assert result.text == bad


def test_use_hip_data_types_with_roc() -> None:
    src = "cudaDataType_t t = CUDA_R_32F;\n"
    assert (
        hip(src, insert_runtime_header=False, roc=True) == "rocblas_datatype_ t = rocblas_datatype_f32_r;\n"
    )
    assert hip(src, insert_runtime_header=False, roc=True, use_hip_data_types=True).startswith(
        "hipDataType t"
    )


def test_bad_input_is_an_error_not_an_exception() -> None:
    result = translate("   \n")
    assert not result.ok and "empty" in result.report.errors[0]
    assert "binary" in translate("ELF\0\0\1").report.errors[0]
    assert "larger than" in translate("x" * (17 * 1024 * 1024)).report.errors[0]


def test_lints_attached_to_result() -> None:
    src = "__global__ void k(int *x) { int lane = threadIdx.x % 32; x[lane] = __shfl_down_sync(0xffffffff, 1, 1); }\n"
    result = translate(src)
    assert {lint.id for lint in result.lints} >= {"AMD001", "AMD004"}
    assert result.to_dict()["lints"][0]["doc"].startswith("HIP/docs/")


def test_roc_and_miopen_argument_rewrites() -> None:
    sparse = "cusparseScsrilu02_analysis(h, m, nnz, d, v, r, c, info, CUSPARSE_SOLVE_POLICY_NO_LEVEL, buf);\n"
    assert hip(sparse, insert_runtime_header=False, roc=True) == (
        "rocsparse_scsrilu0_analysis(h, m, nnz, d, v, r, c, info, rocsparse_analysis_policy_force, "
        "rocsparse_solve_policy_auto, buf);\n"
    )
    dnn = (
        "cudnnSetLRNDescriptor(d, n, a, b, k);\n"
        "cudnnSetPooling2dDescriptor(p, mode, nanOpt, wh, ww, ph, pw, sh, sw);\n"
        "cudaStream_t s;\n"
    )
    assert hip(dnn, insert_runtime_header=False, roc=True, miopen=True) == (
        "miopenSetLRNDescriptor(d, miopenLRNCrossChannel, n, a, b, k);\n"
        "miopenSet2dPoolingDescriptor(p, mode, wh, ww, ph, pw, sh, sw);\n"
        "miopenAcceleratorQueue_t s;\n"
    )


def test_cub_namespace_becomes_hipcub() -> None:
    src = "using namespace cub;\ntypedef ::cub::BlockScan<int, 128> Scan;\ncub::DeviceReduce::Sum(t, n, i, o, k);\nint cubes;\n"
    assert hip(src, insert_runtime_header=False) == (
        "using namespace hipcub;\ntypedef ::hipcub::BlockScan<int, 128> Scan;\n"
        "hipcub::DeviceReduce::Sum(t, n, i, o, k);\nint cubes;\n"
    )


def test_half2_members_and_legacy_cublas() -> None:
    src = "half2 h, g;\nfloat f = (float)h.x + (float)g.y; // h.x\nhalf2 *p; p->x;\n"
    assert hip(src, insert_runtime_header=False) == (
        "half2 h, g;\nfloat f = (float)reinterpret_cast<half&>(h.x) + (float)reinterpret_cast<half&>(g.y); // h.x\n"
        "half2 *p; p->x;\n"
    )
    assert hip(src, insert_runtime_header=False, undocumented_features=False) == src
    legacy = '#include "cublas.h"\ncublasSscal(n, a, x, 1); cublasSetMatrix(m, n, 4, a, m, d, m);\n'
    out = translate(legacy, HipifyOptions(lint=False))
    assert "cublasSscal(n, a, x, 1); hipblasSetMatrix(" in out.text
    assert any(u.name == "cublasSscal" for u in out.report.unconverted)
    assert "hipblasSscal(h, n, a, x, 1);" in hip('#include "cublas_v2.h"\ncublasSscal(h, n, a, x, 1);\n')


def test_already_hip_source_gets_no_second_runtime_header() -> None:
    src = "#include <hip/hip_runtime.h>\n__global__ void k() {}\n"
    assert hip(src) == src
    assert hip(src + "#include <cuda_runtime.h>\n") == src + "\n"


def test_roc_complex_types_and_sparse_stage_arguments() -> None:
    src = "cuDoubleComplex z; cuComplex c;\nst = cusparseSpMV(h, op, a, A, x, b, y, t, alg, buf);\n"
    assert hip(src, insert_runtime_header=False, roc=True) == (
        "rocblas_double_complex z; rocblas_float_complex c;\n"
        "st = rocsparse_spmv(h, op, a, A, x, b, y, t, alg, rocsparse_spmv_stage_compute, buf);\n"
    )
    assert hip(src, insert_runtime_header=False).startswith("hipDoubleComplex z; hipComplex c;\n")


def test_launch_macro_taking_the_kernel_is_rewritten_where_used() -> None:
    src = (
        "#define CUDA_LAUNCH(call, g, b, ...) \\\n    call<<<g, b>>>(__VA_ARGS__);\n"
        "void f() {\n  CUDA_LAUNCH(Inc1, grid, block, cudaMemcpyHostToDevice, y);\n"
        "  // CUDA_LAUNCH(in, a, comment);\n}\n"
    )
    out = hip(src, hip_kernel_execution_syntax=True, insert_runtime_header=False)
    assert "  hipLaunchKernelGGL(Inc1, dim3(grid), dim3(block), 0, 0, hipMemcpyHostToDevice, y);\n" in out
    assert "    call<<<g, b>>>(__VA_ARGS__);\n" in out
    assert "// CUDA_LAUNCH(in, a, comment);" in out


def test_launch_with_template_arguments_over_several_lines() -> None:
    src = (
        "void run() {\n  const int BM = 64;\n  gemm<BM, 128,\n       8>\n      <<<grid, block>>>(a, b);\n}\n"
    )
    result = translate(src, HipifyOptions(lint=False, insert_runtime_header=False))
    assert result.report.errors == [] and result.report.kernel_launches == 1
    out = hip(src, hip_kernel_execution_syntax=True, insert_runtime_header=False)
    assert (
        "  hipLaunchKernelGGL(HIP_KERNEL_NAME(gemm<BM, 128,\n       8>), dim3(grid), dim3(block), 0, 0, a, b);\n"
        in out
    )


def test_spaced_launch_chevrons_are_joined_for_clang() -> None:
    # '<< <' / '>> >' (as editors format launches) compile with nvcc but not with clang
    src = "void f() { k << <g, b >> > (p, n); }\n"
    assert hip(src, insert_runtime_header=False) == "void f() { k <<<g, b >>> (p, n); }\n"
    out = hip(src, hip_kernel_execution_syntax=True, insert_runtime_header=False)
    assert out == "void f() { hipLaunchKernelGGL(k, dim3(g), dim3(b), 0, 0, p, n); }\n"
    # a template operator<< and nested template closers are not launches
    other = "template <class T> ostream& operator<< <T>(ostream&, const X<T>&);\nvector<vector<int>> > v;\n"
    result = translate(other, HipifyOptions(lint=False, insert_runtime_header=False))
    assert result.text == other and result.report.errors == []


def test_cuda_header_guard_macros_become_hip_guards() -> None:
    src = (
        "#include <cuda_runtime.h>\n"
        "#include <curand.h>\n"
        "#ifdef __DRIVER_TYPES_H__\n"
        "#define checkCudaErrors(val) check((val), #val)\n"
        "#endif\n"
        "#if defined(CURAND_H_) && defined(__CUDA_RUNTIME_H__) && defined(CUBLAS_API_H_)\n"
        "#endif\n"
    )
    assert hip(src) == (
        "#include <hip/hip_runtime.h>\n"
        "#include <hiprand/hiprand.h>\n"
        "#ifdef HIP_INCLUDE_HIP_DRIVER_TYPES_H\n"
        "#define checkCudaErrors(val) check((val), #val)\n"
        "#endif\n"
        "#if defined(HIPRAND_H_) && defined(HIP_INCLUDE_HIP_HIP_RUNTIME_H) && defined(HIPBLAS_H)\n"
        "#endif\n"
    )


def test_samples_helper_headers_stay_project_includes() -> None:
    src = '#include <cuda_runtime.h>\n#include <helper_cuda.h>\n#include "helper_math.h"\n'
    assert hip(src) == '#include <hip/hip_runtime.h>\n#include <helper_cuda.h>\n#include "helper_math.h"\n'


def test_project_own_cuda_looking_names_are_not_reported_unknown() -> None:
    src = (
        "#include <cuda_runtime.h>\n"
        "void cuda_check(cudaError_t e, const char *f, int l) {}\n"
        "#define cudaCheck(err) (cuda_check(err, __FILE__, __LINE__))\n"
        "int cuda_num_SMs = 0;\n"
        "void f() { cudaCheck(cudaDeviceSynchronize()); cudaMallocMagic(); }\n"
    )
    result = translate(src, HipifyOptions(lint=False))
    assert "cudaCheck(hipDeviceSynchronize())" in result.text
    assert [(u.name, u.reason) for u in result.report.unconverted] == [("cudaMallocMagic", "unknown")]


def test_cooperative_groups_first_gets_the_runtime_header_before_it() -> None:
    # nvcc pre-includes the runtime; HIP's cooperative-groups header needs hip_runtime.h first
    src = "#include <cooperative_groups.h>\n#include <cuda_runtime.h>\n#include <vector>\n"
    assert (
        hip(src)
        == "#include <hip/hip_runtime.h>\n#include <hip/hip_cooperative_groups.h>\n\n#include <vector>\n"
    )
    after = "#include <cuda_runtime.h>\n#include <cooperative_groups.h>\n"
    assert hip(after) == "#include <hip/hip_runtime.h>\n#include <hip/hip_cooperative_groups.h>\n"


def test_calling_convention_macro_is_dropped() -> None:
    src = "#include <cuda_runtime.h>\nvoid CUDART_CB done(void *data) {}\ncudaHostFn_t fn = done;\n"
    assert hip(src) == "#include <hip/hip_runtime.h>\nvoid  done(void *data) {}\nhipHostFn_t fn = done;\n"


def test_cuda_default_arguments_hip_lacks_are_written_out() -> None:
    src = (
        "void f(cudaArray_t *a, cudaChannelFormatDesc *d, cudaExtent e, cudaStream_t s, cudaEvent_t ev) {\n"
        "  cudaMalloc3DArray(a, d, e);\n"
        "  cudaMalloc3DArray(a, d, e, cudaArraySurfaceLoadStore);\n"
        "  cudaStreamWaitEvent(s, ev);\n"
        "  cudaStreamWaitEvent(s, ev, 0);\n"
        "  cudaLaunchCooperativeKernel((void *)k, 1, 64, args);\n"
        "}\n"
    )
    out = hip(src, insert_runtime_header=False)
    assert "  hipMalloc3DArray(a, d, e, 0);\n" in out
    assert "  hipMalloc3DArray(a, d, e, hipArraySurfaceLoadStore);\n" in out
    assert "  hipStreamWaitEvent(s, ev, 0);\n  hipStreamWaitEvent(s, ev, 0);\n" in out
    assert "  hipLaunchCooperativeKernel((void *)k, 1, 64, args, 0, 0);\n" in out


def test_kernels_passed_by_name_to_function_attribute_calls_are_cast() -> None:
    src = (
        "template <int BLOCK>\n"
        "__global__ void __launch_bounds__(BLOCK) tiled(float *x) {}\n"
        "__global__ void plain(float *x) {}\n"
        "void f(void *func) {\n"
        "  cudaFuncAttributes attr;\n"
        "  cudaFuncSetAttribute(tiled<32>, cudaFuncAttributeMaxDynamicSharedMemorySize, 1 << 16);\n"
        "  cudaFuncGetAttributes(&attr, plain);\n"
        "  cudaFuncSetCacheConfig(func, cudaFuncCachePreferShared);\n"
        "  cudaFuncSetCacheConfig(elsewhere, cudaFuncCachePreferShared);\n"
        "}\n"
    )
    out = hip(src, insert_runtime_header=False)
    assert (
        "hipFuncSetAttribute(reinterpret_cast<const void*>(tiled<32>), "
        "hipFuncAttributeMaxDynamicSharedMemorySize, 1 << 16);" in out
    )
    assert "hipFuncGetAttributes(&attr, reinterpret_cast<const void*>(plain));" in out
    # a void* variable, and a name no file of the project declares __global__, stay as written
    assert "hipFuncSetCacheConfig(func, hipFuncCachePreferShared);" in out
    assert "hipFuncSetCacheConfig(elsewhere, hipFuncCachePreferShared);" in out
    known = hip(src, insert_runtime_header=False, project_kernels=frozenset({"elsewhere"}))
    assert (
        "hipFuncSetCacheConfig(reinterpret_cast<const void*>(elsewhere), hipFuncCachePreferShared);" in known
    )


def test_warp_sync_functions_kept_with_when_rocm_has_them() -> None:
    result = translate(
        "__device__ float f(float v) { return __shfl_down_sync(~0ull, v, 1); }\n", HipifyOptions(lint=False)
    )
    assert "__shfl_down_sync(~0ull, v, 1)" in result.text
    [u] = result.report.unconverted
    assert (
        u.name == "__shfl_down_sync"
        and "ROCm 6.2" in u.detail
        and "HIP_ENABLE_WARP_SYNC_BUILTINS" in u.detail
    )


def test_thrust_cuda_backend_becomes_rocthrust_hip_backend() -> None:
    src = (
        "#include <thrust/system/cuda/execution_policy.h>\n"
        "void f(cudaStream_t s, int *p, int n) {\n"
        "  thrust::sort(thrust::cuda::par.on(s), p, p + n);\n"
        "  auto pol = thrust::system::cuda::par;\n"
        "  using thrust::cuda_cub::tag;\n"
        "  int cuda = 1; other::cuda::x();\n"
        "}\n"
    )
    assert hip(src, insert_runtime_header=False) == (
        "#include <thrust/system/hip/execution_policy.h>\n"
        "void f(hipStream_t s, int *p, int n) {\n"
        "  thrust::sort(thrust::hip::par.on(s), p, p + n);\n"
        "  auto pol = thrust::system::hip::par;\n"
        "  using thrust::hip_rocprim::tag;\n"
        "  int cuda = 1; other::cuda::x();\n"
        "}\n"
    )


def test_launch_of_a_kernel_name_pasted_in_a_macro() -> None:
    src = "#define BIND(t)   \\\n  void run_##t(int *a) { hist_##t##_kernel<<<1, 256>>>(a); }\n"
    out = hip(src, hip_kernel_execution_syntax=True, insert_runtime_header=False)
    assert out == (
        "#define BIND(t)   \\\n"
        "  void run_##t(int *a) { hipLaunchKernelGGL(hist_##t##_kernel, dim3(1), dim3(256), 0, 0, a); }\n"
    )
