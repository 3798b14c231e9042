# The CPU image codecs: TurboJPEG (libjpeg-turbo's simple API) and libspng.  Debian packages
# libturbojpeg0-dev and libspng-dev (data_tools/install-deps.sh); pkg-config, when present, points
# at non-default installs.  Creates the imported targets Sluice::turbojpeg and Sluice::spng.
find_package(PkgConfig QUIET)
set(_turbojpeg_pc libturbojpeg)
set(_spng_pc spng)
foreach(_codec turbojpeg spng)
  string(TOUPPER ${_codec} _C)
  if(PKG_CONFIG_FOUND)
    pkg_check_modules(PC_${_C} QUIET ${_${_codec}_pc})
  endif()
  find_library(${_C}_LIBRARY ${_codec} HINTS ${PC_${_C}_LIBRARY_DIRS} ${${_C}_ROOT} PATH_SUFFIXES lib)
  find_path(${_C}_INCLUDE_DIR ${_codec}.h HINTS ${PC_${_C}_INCLUDE_DIRS} ${${_C}_ROOT} PATH_SUFFIXES include)
  if(NOT ${_C}_LIBRARY OR NOT ${_C}_INCLUDE_DIR)
    message(FATAL_ERROR "${_codec} was not found (library: ${${_C}_LIBRARY}, header: ${${_C}_INCLUDE_DIR}); "
                        "the image inputs need it. Install it with data_tools/install-deps.sh "
                        "(Debian: apt-get install libturbojpeg0-dev libspng-dev) or set ${_C}_ROOT.")
  endif()
  add_library(Sluice::${_codec} UNKNOWN IMPORTED)
  set_target_properties(Sluice::${_codec} PROPERTIES
    IMPORTED_LOCATION ${${_C}_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${${_C}_INCLUDE_DIR})
  message(STATUS "Found ${_codec}: ${${_C}_LIBRARY}")
endforeach()
