"""CudaDevice: the device protocol on a real NVIDIA GPU (cuda-python + CuPy).

(probe only in this step; the device follows)
"""
from __future__ import annotations


def probe_cuda() -> tuple[bool, str]:
    """(True, "") when the NVIDIA driver loads and reports a GPU, else (False, why not).

    Never raises: a missing driver library, a driver too old for the
    runtime, or zero devices are all reasons to fall back to the simulator.
    """
    try:
        from cuda.bindings import driver
    except Exception as e:                       # cuda-python not installed or broken
        return False, f"cuda-python cannot be imported ({type(e).__name__})"
    try:
        (err,) = driver.cuInit(0)
    except Exception:                            # libcuda.so not found: no NVIDIA driver
        return False, "no NVIDIA driver found"
    if err == driver.CUresult.CUDA_ERROR_NO_DEVICE:
        return False, "the NVIDIA driver reports no GPU"
    if err != driver.CUresult.CUDA_SUCCESS:
        return False, f"the NVIDIA driver did not initialise ({err.name})"
    err, count = driver.cuDeviceGetCount()
    if err != driver.CUresult.CUDA_SUCCESS or count == 0:
        return False, "the NVIDIA driver reports no GPU"
    return True, ""
