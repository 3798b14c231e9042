# cuDNN and NCCL are not packaged by Debian: they live in the CUDA toolkit folder or wherever
# CUDNN_ROOT / NCCL_ROOT point.  Creates the imported targets Sluice::cudnn and Sluice::nccl.
foreach(_lib cudnn nccl)
  string(TOUPPER ${_lib} _LIB)
  set(_hints ${${_LIB}_ROOT} $ENV{${_LIB}_ROOT} ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT})
  find_library(${_LIB}_LIBRARY ${_lib} HINTS ${_hints} PATH_SUFFIXES lib lib64 lib/x86_64-linux-gnu)
  find_path(${_LIB}_INCLUDE_DIR ${_lib}.h HINTS ${_hints} ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
  if(NOT ${_LIB}_LIBRARY OR NOT ${_LIB}_INCLUDE_DIR)
    message(FATAL_ERROR "SLUICE_CUDA is ON but ${_lib} was not found (library: ${${_LIB}_LIBRARY}, "
                        "header: ${${_LIB}_INCLUDE_DIR}). Set ${_LIB}_ROOT to its install folder, "
                        "or configure with -DSLUICE_CUDA=OFF for the CPU-only build.")
  endif()
  add_library(Sluice::${_lib} UNKNOWN IMPORTED)
  set_target_properties(Sluice::${_lib} PROPERTIES
    IMPORTED_LOCATION ${${_LIB}_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${${_LIB}_INCLUDE_DIR})
  message(STATUS "Found ${_lib}: ${${_LIB}_LIBRARY}")
endforeach()
