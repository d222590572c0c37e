"""The AMD porting lint rules (``lints``): each rule's id, severity, title, hint and the HIP
documentation page it comes from (paths in the HIP docs corpus), and the tables of API names, lane
masks and constants the rules match. The scan that applies them is ``lints``.
"""

from __future__ import annotations

from dataclasses import dataclass

from hipbot.i18n import N_

PORTING_GUIDE = "HIP/docs/how-to/hip_porting_guide.md"
KERNEL_LANGUAGE = "HIP/docs/reference/kernel_language.rst"
PERFORMANCE = "HIP/docs/how-to/performance_guidelines.rst"
HIPIFY_TABLES = "HIPIFY/docs/tables/CUDA_Device_API_supported_by_HIP.md"


@dataclass(frozen=True)
class Rule:
    id: str
    severity: str  # "error": will not compile or run on AMD; "warning": likely wrong; "info"
    title: str
    hint: str
    doc: str


RULES: dict[str, Rule] = {
    r.id: r
    for r in (
        Rule(
            "AMD001",
            "warning",
            N_("lane arithmetic assumes a 32-lane warp"),
            N_(
                "AMD GPUs run 64-lane wavefronts (gfx9/CDNA); use warpSize (or __AMDGCN_WAVEFRONT_SIZE) "
                "instead of 32/31/5 in lane and warp index math"
            ),
            KERNEL_LANGUAGE,
        ),
        Rule(
            "AMD002",
            "warning",
            N_("warp size hard-coded as 32"),
            N_(
                "do not assume a warp size of 32 or 64; query warpSize in device code or "
                "hipDeviceProp_t::warpSize on the host"
            ),
            PORTING_GUIDE,
        ),
        Rule(
            "AMD003",
            "warning",
            N_("shared-memory array sized by a 32-lane warp"),
            N_(
                "size per-warp shared arrays from the wavefront size (64 on CDNA) or the block size divided "
                "by warpSize; a [32] array overflows with 64 lanes"
            ),
            KERNEL_LANGUAGE,
        ),
        Rule(
            "AMD004",
            "warning",
            N_("32-bit lane mask"),
            N_(
                "HIP's __ballot/__activemask return 64-bit masks and the *_sync functions take an "
                "unsigned long long mask; use 0xffffffffffffffffULL (or __activemask()) and 64-bit variables"
            ),
            KERNEL_LANGUAGE,
        ),
        Rule(
            "AMD005",
            "error",
            N_("inline PTX assembly"),
            N_(
                "PTX does not exist on AMD; replace the asm block with a HIP intrinsic or portable code "
                "(HIP accepts GCN/CDNA ISA in asm, not PTX)"
            ),
            KERNEL_LANGUAGE,
        ),
        Rule(
            "AMD006",
            "error",
            N_("NVIDIA-only intrinsic"),
            N_(
                "no HIP equivalent; rewrite with portable code or guard it with #ifdef __HIP_PLATFORM_NVIDIA__"
            ),
            HIPIFY_TABLES,
        ),
        Rule(
            "AMD007",
            "warning",
            N_("texture/surface reference"),
            N_(
                "texture and surface references are deprecated in HIP (removed in CUDA 12); use texture "
                "objects (hipTextureObject_t) or plain __ldg loads"
            ),
            PORTING_GUIDE,
        ),
        Rule(
            "AMD008",
            "warning",
            N_("__CUDA_ARCH__ check"),
            N_(
                "HIP-Clang does not define __CUDA_ARCH__ in device code; use __HIP_DEVICE_COMPILE__ for "
                "host/device and the __HIP_ARCH_HAS_*__ feature macros for capabilities"
            ),
            PORTING_GUIDE,
        ),
        Rule(
            "AMD009",
            "error",
            N_("cooperative-groups feature HIP lacks"),
            N_(
                "HIP's cooperative groups have no clusters, memcpy_async/wait, invoke_one or "
                "block_tile_memory; use thread_block/tiled_partition and explicit loads"
            ),
            KERNEL_LANGUAGE,
        ),
        Rule(
            "AMD010",
            "warning",
            N_("warpSize used as a compile-time constant"),
            N_(
                "warpSize is a device variable in HIP, not a constexpr; use a template parameter or "
                "__AMDGCN_WAVEFRONT_SIZE for array bounds and template arguments"
            ),
            KERNEL_LANGUAGE,
        ),
        Rule(
            "AMD011",
            "error",
            N_("warp matrix (wmma) API"),
            N_("nvcuda::wmma has no HIP equivalent; use rocWMMA (rocwmma::) on AMD"),
            KERNEL_LANGUAGE,
        ),
        Rule(
            "AMD012",
            "info",
            N_("__launch_bounds__ second argument means something else on AMD"),
            N_(
                "in HIP the second argument is the minimum number of warps per execution unit, not blocks "
                "per multiprocessor; recheck the value"
            ),
            KERNEL_LANGUAGE,
        ),
    )
}

LANE_WORDS = ("lane", "warp", "threadidx", "tid", "wid")
# the warp reductions: masked like the other *_sync functions, and NVIDIA-only (sm_80+)
REDUCE_SYNC = frozenset(f"__reduce_{op}_sync" for op in ("add", "min", "max", "and", "or", "xor"))
MASK_FUNCS = REDUCE_SYNC | frozenset(
    {
        "__shfl_sync",
        "__shfl_up_sync",
        "__shfl_down_sync",
        "__shfl_xor_sync",
        "__ballot_sync",
        "__any_sync",
        "__all_sync",
        "__uni_sync",
        "__match_any_sync",
        "__match_all_sync",
        "__syncwarp",
    }
)
MASK_RESULT_FUNCS = frozenset({"__ballot_sync", "__ballot", "__activemask", "__match_any_sync"})
MASK_32_TYPES = frozenset({"unsigned", "int", "uint32_t", "uint", "int32_t"})
FULL_32 = frozenset({"0xffffffff", "0xffffffffu", "0xffffffffl", "0xfffffffful", "4294967295", "4294967295u"})
NVIDIA_ONLY = REDUCE_SYNC | frozenset(
    {
        "__nanosleep",
        "__ldcg",
        "__ldca",
        "__ldcs",
        "__ldlu",
        "__ldcv",
        "__stwb",
        "__stcg",
        "__stcs",
        "__stwt",
        "__prof_trigger",
        "__isGlobal",
        "__isShared",
        "__isConstant",
        "__isLocal",
        "__cvta_generic_to_shared",
        "__cvta_generic_to_global",
        "__cvta_shared_to_generic",
        "__fns",
        "__pipeline_memcpy_async",
        "__pipeline_commit",
        "__pipeline_wait_prior",
        "__trap",
        "__brkpt",
        "__dp4a",
        "__dp2a_lo",
        "__dp2a_hi",
    }
)
TEXTURE_REFERENCE = frozenset(
    {
        "texture",
        "surface",
        "cudaBindTexture",
        "cudaBindTexture2D",
        "cudaBindTextureToArray",
        "cudaUnbindTexture",
        "cudaGetTextureReference",
        "hipBindTexture",
        "hipBindTexture2D",
        "hipBindTextureToArray",
        "hipUnbindTexture",
        "hipGetTextureReference",
        "cuTexRefCreate",
        "cuTexRefSetAddress",
        "cuTexRefSetArray",
    }
)
CG_MISSING = frozenset(
    {
        "this_cluster",
        "cluster_group",
        "memcpy_async",
        "wait_prior",
        "invoke_one",
        "invoke_one_broadcast",
        "block_tile_memory",
        "labeled_partition",
        "cluster_dims",
        "num_clusters",
    }
)
CG_NAMESPACES = frozenset({"cg", "cooperative_groups", "experimental"})
