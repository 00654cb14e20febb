"""Every CUDA source of gpu_ops compiles with NVRTC for sm_80 and sm_90 (no GPU needed, only libnvrtc)."""

import pytest

from gpu_ops.kernels import ALL_SOURCES, kernel_source
from gpu_ops.nvrtc_check import ARCHITECTURES, compile_source, nvrtc_available

NVRTC_OK, NVRTC_REASON = nvrtc_available()
needs_nvrtc = pytest.mark.skipif(not NVRTC_OK, reason=NVRTC_REASON)

# The functions the ops of this package launch by name (backend.get_kernel): they must be in the PTX.
LAUNCHED_KERNELS = {
    "colorspace": {"yuv420_to_rgb", "rgb_to_yuv420"},
    "affine_crop": {"warp_crop", "crop_faces"},
    "paste_back": {"paste_back"},
    "mesh_warp": {"rasterize_triangles", "remap_field", "remap_bilinear"},
    "masks": {"polygon_rows", "polygon_outline"},
    "color_transfer": {"shading_cells", "shading_ratio", "apply_shading"},
    "multiband_blend": {"blend_base", "pyramid_down", "blend_stack", "blend_finish"},
}


def test_registry_holds_the_core_sources() -> None:
    names = [name for name, _ in ALL_SOURCES]
    assert len(names) == len(set(names))
    assert set(LAUNCHED_KERNELS) <= set(names)
    assert 'extern "C" __global__ void crop_faces' in kernel_source("affine_crop")


@needs_nvrtc
@pytest.mark.parametrize("architecture", ARCHITECTURES)
@pytest.mark.parametrize(("name", "source"), ALL_SOURCES, ids=[name for name, _ in ALL_SOURCES])
def test_kernel_source_compiles(name: str, source: str, architecture: str) -> None:
    result = compile_source(source, name, architecture)
    assert result.ok, f"{name} for {architecture}:\n{result.log}"
    assert result.entry_points, f'{name} defines no extern "C" __global__ kernel'
    assert LAUNCHED_KERNELS.get(name, set()) <= set(result.entry_points)


@needs_nvrtc
def test_broken_source_fails_with_a_log() -> None:
    result = compile_source('extern "C" __global__ void broken(int* x) { x[0] = undefined_name; }', "broken")
    assert not result.ok
    assert "undefined_name" in result.log


def test_shared_helpers_come_from_one_header() -> None:
    """OpenCV's line clipping is written once (common.cuh) and reaches both rasterisers at load time, with
    compiler messages kept on each .cu file's own line numbers."""
    for name in ("masks", "mesh_warp"):
        source = kernel_source(name)
        assert source.count("bool clip_line(") == 1
        assert f'#line 1 "{name}.cu"' in source
