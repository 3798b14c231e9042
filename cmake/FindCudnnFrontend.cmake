# The header-only cuDNN frontend (C++ graph API), from PyPI's nvidia-cudnn-frontend (pinned in
# data_tools/requirements.txt), which installs include/cudnn_frontend.h into Python's site-packages;
# or wherever CUDNN_FRONTEND_ROOT points.  Optional: without it the engine keeps the legacy cuDNN
# calls.  Sets SLUICE_CUDNN_FRONTEND_INCLUDE when found.
find_package(Python3 QUIET COMPONENTS Interpreter)
set(_fe_hints ${CUDNN_FRONTEND_ROOT} $ENV{CUDNN_FRONTEND_ROOT})
if(Python3_Interpreter_FOUND)
  execute_process(COMMAND ${Python3_EXECUTABLE} -c "import sysconfig; print(sysconfig.get_paths()['purelib'])"
                  OUTPUT_VARIABLE _fe_purelib OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  list(APPEND _fe_hints ${_fe_purelib})
endif()
find_path(SLUICE_CUDNN_FRONTEND_INCLUDE cudnn_frontend.h HINTS ${_fe_hints} PATH_SUFFIXES include NO_DEFAULT_PATH)
if(SLUICE_CUDNN_FRONTEND_INCLUDE)
  message(STATUS "Found the cuDNN frontend: ${SLUICE_CUDNN_FRONTEND_INCLUDE}")
else()
  message(STATUS "cuDNN frontend not found (pip install nvidia-cudnn-frontend, or set CUDNN_FRONTEND_ROOT): "
                 "convolutions use the legacy cuDNN API only")
endif()
