# FindJeMalloc: jemalloc's library as the imported target JeMalloc::JeMalloc.
#
# Used by embcache's own build and installed next to embcacheConfig.cmake, which calls
# find_dependency(JeMalloc). pkg-config (jemalloc.pc), when present, gives the search hints;
# find_path / find_library do the finding, so a jemalloc without a .pc file is found too.
#
# Result variables: JeMalloc_FOUND, JeMalloc_VERSION (from jemalloc.pc when known),
# JeMalloc_INCLUDE_DIR, JeMalloc_LIBRARY (cache entries: override them to pick another copy).
find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(PC_JEMALLOC QUIET jemalloc)
endif()

find_path(JeMalloc_INCLUDE_DIR jemalloc/jemalloc.h HINTS ${PC_JEMALLOC_INCLUDE_DIRS})
find_library(JeMalloc_LIBRARY NAMES jemalloc HINTS ${PC_JEMALLOC_LIBRARY_DIRS})
if(PC_JEMALLOC_VERSION)
  set(JeMalloc_VERSION "${PC_JEMALLOC_VERSION}")
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(JeMalloc
  REQUIRED_VARS JeMalloc_LIBRARY JeMalloc_INCLUDE_DIR
  VERSION_VAR JeMalloc_VERSION)

if(JeMalloc_FOUND AND NOT TARGET JeMalloc::JeMalloc)
  add_library(JeMalloc::JeMalloc UNKNOWN IMPORTED)
  set_target_properties(JeMalloc::JeMalloc PROPERTIES
    IMPORTED_LOCATION "${JeMalloc_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${JeMalloc_INCLUDE_DIR}")
endif()
mark_as_advanced(JeMalloc_INCLUDE_DIR JeMalloc_LIBRARY)
