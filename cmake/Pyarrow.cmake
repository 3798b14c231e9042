# Apache Arrow C++ and Parquet for the Parquet inputs (src/io/parquet_source.cpp), from PyPI's
# pyarrow wheel: Debian 12 packages neither, and the wheel ships the headers and the shared
# libraries (libarrow, libparquet, libarrow_s3 with the AWS SDK inside) that a C++ build links
# against.  data_tools/install-deps.sh installs the pinned wheel (data_tools/requirements.txt).
#
#   SLUICE_PARQUET=AUTO  (default) Parquet inputs when the wheel is found, else a build without them
#                        whose --input x.parquet says how to enable them
#   SLUICE_PARQUET=ON    the wheel is required (CI)
#   SLUICE_PARQUET=OFF   never
# The Python asked is $SLUICE_PYTHON, else the python3 on PATH (the one install-deps.sh pip-installs into).
#
# The wheel ships only versioned names (libarrow.so.2600; RUNPATH $ORIGIN between them), so the
# imported targets name those files by full path and the binary gets their folder as its RPATH.
# The headers need C++20 (std::span, std::bit_width): they are given to parquet_source.cpp alone,
# compiled as C++20, never to a .cu file.  Creates Sluice::parquet (with arrow and arrow_s3).
set(SLUICE_PARQUET AUTO CACHE STRING "Parquet inputs from the pyarrow wheel: AUTO, ON or OFF")
set_property(CACHE SLUICE_PARQUET PROPERTY STRINGS AUTO ON OFF)
set(SLUICE_HAVE_PARQUET OFF)

if(NOT SLUICE_PARQUET STREQUAL "OFF")
  if(DEFINED ENV{SLUICE_PYTHON} AND NOT "$ENV{SLUICE_PYTHON}" STREQUAL "")
    set(_pa_python "$ENV{SLUICE_PYTHON}")
  else()
    find_program(_pa_python_found NAMES python3)
    set(_pa_python "${_pa_python_found}")
  endif()
  set(_pa_why "")
  if(NOT _pa_python)
    set(_pa_why "no python3 on PATH")
  else()
    execute_process(
      COMMAND "${_pa_python}" -c "import pyarrow as pa; print(pa.__version__); print(pa.get_include()); print(pa.get_library_dirs()[0])"
      OUTPUT_VARIABLE _pa_out ERROR_VARIABLE _pa_err RESULT_VARIABLE _pa_rc OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(NOT _pa_rc EQUAL 0)
      set(_pa_why "${_pa_python} cannot import pyarrow")
    else()
      string(REPLACE "\n" ";" _pa_out "${_pa_out}")
      list(GET _pa_out 0 SLUICE_PYARROW_VERSION)
      list(GET _pa_out 1 _pa_include)
      list(GET _pa_out 2 _pa_libdir)
      # The wheel's SO version: libarrow.so.2600 for pyarrow 26.
      file(GLOB _pa_arrow_libs "${_pa_libdir}/libarrow.so.*")
      set(_pa_arrow "")
      foreach(_f ${_pa_arrow_libs})
        if(_f MATCHES "/libarrow\\.so\\.([0-9]+)$")
          set(_pa_arrow "${_f}")
          set(_pa_so "${CMAKE_MATCH_1}")
        endif()
      endforeach()
      if(NOT _pa_arrow OR NOT EXISTS "${_pa_libdir}/libparquet.so.${_pa_so}"
         OR NOT EXISTS "${_pa_include}/parquet/arrow/reader.h")
        set(_pa_why "pyarrow ${SLUICE_PYARROW_VERSION} in ${_pa_libdir} lacks libarrow.so.N, libparquet.so.N or the headers")
      endif()
    endif()
  endif()

  if(_pa_why)
    if(SLUICE_PARQUET STREQUAL "ON")
      message(FATAL_ERROR "SLUICE_PARQUET=ON but ${_pa_why}. Install the wheel with data_tools/install-deps.sh "
                          "(pip install -r data_tools/requirements.txt), or set SLUICE_PYTHON to a Python that has it.")
    endif()
    message(STATUS "Sluice: no Parquet inputs (${_pa_why}; data_tools/install-deps.sh installs pyarrow)")
  else()
    foreach(_lib arrow parquet arrow_s3)
      if(EXISTS "${_pa_libdir}/lib${_lib}.so.${_pa_so}")
        add_library(Sluice::pa_${_lib} SHARED IMPORTED)
        set_target_properties(Sluice::pa_${_lib} PROPERTIES IMPORTED_LOCATION "${_pa_libdir}/lib${_lib}.so.${_pa_so}")
      endif()
    endforeach()
    add_library(Sluice::parquet INTERFACE IMPORTED)
    target_link_libraries(Sluice::parquet INTERFACE Sluice::pa_parquet Sluice::pa_arrow)
    if(TARGET Sluice::pa_arrow_s3)
      # s3:// inputs: pyarrow >= 24 builds the S3 filesystem as its own library.
      target_link_libraries(Sluice::parquet INTERFACE Sluice::pa_arrow_s3)
    endif()
    set(SLUICE_HAVE_PARQUET ON)
    set(SLUICE_PYARROW_INCLUDE "${_pa_include}")
    message(STATUS "Sluice: Parquet inputs from pyarrow ${SLUICE_PYARROW_VERSION} (${_pa_libdir})")
  endif()
endif()
