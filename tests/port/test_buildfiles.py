"""Build-file translation (CMake, Makefiles, shell scripts) and translation-unit discovery."""

from __future__ import annotations

from pathlib import Path

from hipbot.agents.port.buildfiles import translate_build_file, translate_cmake, translate_make
from hipbot.agents.port.flags import translate_flags
from hipbot.agents.port.units import discover

CMAKE = """\
cmake_minimum_required(VERSION 3.18)
project(demo LANGUAGES CXX CUDA)
find_package(CUDAToolkit REQUIRED)
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_FLAGS "${CMAKE_CUDA_FLAGS} --use_fast_math -lineinfo")
add_executable(app main.cu util.cpp)
set_target_properties(app PROPERTIES CUDA_ARCHITECTURES 80 CUDA_SEPARABLE_COMPILATION ON)
set_source_files_properties(util.cpp PROPERTIES LANGUAGE CUDA)
target_link_libraries(app PRIVATE CUDA::cudart CUDA::cublas CUDA::curand)
include_directories(${CUDA_INCLUDE_DIRS})
"""


def test_cmake_becomes_hip() -> None:
    result = translate_cmake(CMAKE, "gfx942")
    text = result.text
    assert "cmake_minimum_required(VERSION 3.21)" in text
    assert "project(demo LANGUAGES CXX HIP)" in text
    assert "find_package(hip REQUIRED)" in text and "CUDAToolkit" not in text
    assert "set(CMAKE_HIP_STANDARD 17)" in text
    assert '"${CMAKE_HIP_FLAGS} -ffast-math -gline-tables-only"' in text
    assert "add_executable(app main.hip util.cpp)" in text
    assert "HIP_ARCHITECTURES gfx942" in text and "CUDA_SEPARABLE_COMPILATION" not in text
    assert 'string(APPEND CMAKE_HIP_FLAGS " -fgpu-rdc")' in text
    assert "LANGUAGE HIP" in text
    assert "hip::host roc::hipblas hip::hiprand" in text
    assert "find_package(hipblas REQUIRED)" in text and "find_package(hiprand REQUIRED)" in text
    assert "# include_directories(${CUDA_INCLUDE_DIRS})" in text
    reasons = " ".join(e.reason for e in result.edits)
    assert "CUDA::cublas -> roc::hipblas" in reasons and "HIP language" in reasons


def test_makefile_nvcc_flags() -> None:
    make = (
        "NVCC ?= /usr/local/cuda/bin/nvcc\n"
        "FLAGS = -arch=sm_80 -gencode arch=compute_70,code=sm_70 -rdc=true --maxrregcount=64 -Xcompiler -fopenmp,-Wall\n"
        "LIBS = -lcudart -lcublas -L/usr/local/cuda/lib64\n"
        "app: main.cu  # the program\n"
        "\t$(NVCC) $(FLAGS) -x cu main.cu -o app $(LIBS)\n"
    )
    result = translate_make(make, "gfx90a")
    lines = result.text.split("\n")
    assert lines[0] == "NVCC ?= hipcc"
    assert lines[1] == "FLAGS = --offload-arch=gfx90a -fgpu-rdc -fopenmp -Wall"
    assert lines[2] == "LIBS = -lamdhip64 -lhipblas -L/opt/rocm/lib64"
    assert lines[3] == "app: main.hip  # the program"
    assert lines[4] == "\t$(NVCC) $(FLAGS) -x hip main.hip -o app $(LIBS)"
    notes = " ".join(e.reason for e in result.edits)
    assert "__launch_bounds__" in notes  # --maxrregcount is dropped with what HIP offers instead


def test_shell_script_and_flag_notes() -> None:
    script = '#!/bin/bash\nset -e\necho "building with nvcc"\nnvcc -O3 -arch sm_75 --expt-relaxed-constexpr k.cu -o k\n'
    result = translate_build_file(Path("build.sh"), script, "gfx90a")
    assert result is not None and result.kind == "shell"
    assert result.text.split("\n")[2] == 'echo "building with nvcc"'  # messages are not commands
    assert result.text.split("\n")[3] == "hipcc -O3 --offload-arch=gfx90a k.hip -o k"
    assert translate_build_file(Path("run.sh"), "./app\n", "gfx90a") is None
    flags = translate_flags(["-dc", "-G", "-lnvToolsExt", "-Xptxas", "-v"], "gfx90a")
    assert flags.args == ["-fgpu-rdc", "-c", "-g", "-lroctx64"]
    assert any("ptxas" in n.reason for n in flags.notes)


def test_units_from_build_files(tmp_path: Path) -> None:
    (tmp_path / "cm" / "inc").mkdir(parents=True)
    (tmp_path / "cm" / "CMakeLists.txt").write_text(
        "project(x LANGUAGES CUDA)\nset(CMAKE_CUDA_STANDARD 17)\ninclude_directories(inc)\nadd_definitions(-DUSE_X)\n"
        "set(SRCS a.cu b.cu)\nadd_executable(app ${SRCS})\ntarget_compile_definitions(app PRIVATE N=4)\n"
    )
    for name in ("a.cu", "b.cu", "unused.cu"):
        (tmp_path / "cm" / name).write_text("int x;\n")
    (tmp_path / "mk" / "common").mkdir(parents=True)
    (tmp_path / "mk" / "Makefile").write_text(
        "INC = -Icommon\nall:\n\tnvcc $(INC) -DFAST -Xcompiler -fopenmp main.cu -o m\n"
    )
    (tmp_path / "mk" / "main.cu").write_text('#include "kernels.cu"\n')
    (tmp_path / "mk" / "kernels.cu").write_text("int k;\n")
    (tmp_path / "pat").mkdir()
    (tmp_path / "pat" / "Makefile").write_text(
        "SRC = app.cu\napp: $(SRC:.cu=.o)\n%.o: %.cu\n\tnvcc -c $*.cu\n"
    )
    (tmp_path / "pat" / "app.cu").write_text("int a;\n")
    (tmp_path / "pat" / "LICENSE.app.cu").write_text("Copyright (c) someone\n")
    (tmp_path / "loose").mkdir()
    (tmp_path / "loose" / "solo.cu").write_text("int s;\n")
    units = {str(u.source): u for u in discover(tmp_path)}
    assert set(units) == {"cm/a.cu", "cm/b.cu", "mk/main.cu", "pat/app.cu", "loose/solo.cu"}
    a = units["cm/a.cu"]
    assert (
        a.include_dirs == [Path("cm/inc")] and a.defines == ["USE_X", "N=4"] and a.options == ["-std=c++17"]
    )
    m = units["mk/main.cu"]
    assert m.include_dirs == [Path("mk/common")] and "FAST" in m.defines and "-fopenmp" in m.options
