# nvJPEG (GPU JPEG decoding, image/cuda/).  Creates the imported target Sluice::nvjpeg, linked
# dynamically: at run time the host's own libnvjpeg.so.13 is used (the device bundle leaves
# CUDA-family libraries to the host).
#
# Where it is looked for, in order:
#   1. the CUDA toolkit (FindCUDAToolkit's CUDA::nvjpeg; GPU hosts with libnvjpeg-dev-13-x);
#   2. NVJPEG_ROOT (CMake or environment variable): a folder with include/nvjpeg.h and lib/;
#   3. PyPI's nvidia-nvjpeg wheel (site-packages/nvidia/cu13), which data_tools/install-deps.sh
#      installs when the toolkit has no nvJPEG.  The wheel ships only libnvjpeg.so.13 (no
#      unversioned libnvjpeg.so), so the versioned name is searched too.
if(TARGET CUDA::nvjpeg)
  add_library(Sluice::nvjpeg INTERFACE IMPORTED)
  set_target_properties(Sluice::nvjpeg PROPERTIES INTERFACE_LINK_LIBRARIES CUDA::nvjpeg)
  message(STATUS "Found nvjpeg: CUDA toolkit (CUDA::nvjpeg)")
  return()
endif()

set(_nvjpeg_hints ${NVJPEG_ROOT} $ENV{NVJPEG_ROOT})
# The site-packages of the `python3` on PATH (where install-deps.sh pip-installs) and of the one
# CMake finds, when they differ.
find_program(_nvjpeg_python python3)
find_package(Python3 QUIET COMPONENTS Interpreter)
foreach(_py IN ITEMS ${_nvjpeg_python} ${Python3_EXECUTABLE})
  execute_process(
    COMMAND ${_py} -c "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    OUTPUT_VARIABLE _nvjpeg_site OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(_nvjpeg_site)
    list(APPEND _nvjpeg_hints "${_nvjpeg_site}/nvidia/cu${CUDAToolkit_VERSION_MAJOR}")
  endif()
endforeach()

find_path(NVJPEG_INCLUDE_DIR nvjpeg.h HINTS ${_nvjpeg_hints} ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
find_library(NVJPEG_LIBRARY NAMES nvjpeg libnvjpeg.so.${CUDAToolkit_VERSION_MAJOR}
             HINTS ${_nvjpeg_hints} ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib lib64)
if(NOT NVJPEG_INCLUDE_DIR OR NOT NVJPEG_LIBRARY)
  message(FATAL_ERROR "SLUICE_CUDA is ON but nvJPEG was not found (header: ${NVJPEG_INCLUDE_DIR}, library: "
                      "${NVJPEG_LIBRARY}). Install it with data_tools/install-deps.sh (PyPI's nvidia-nvjpeg for "
                      "CUDA ${CUDAToolkit_VERSION_MAJOR}), set NVJPEG_ROOT to a folder holding include/nvjpeg.h "
                      "and lib/libnvjpeg.so*, or configure with -DSLUICE_CUDA=OFF.")
endif()
add_library(Sluice::nvjpeg UNKNOWN IMPORTED)
set_target_properties(Sluice::nvjpeg PROPERTIES
  IMPORTED_LOCATION ${NVJPEG_LIBRARY}
  INTERFACE_INCLUDE_DIRECTORIES ${NVJPEG_INCLUDE_DIR})
message(STATUS "Found nvjpeg: ${NVJPEG_LIBRARY}")
