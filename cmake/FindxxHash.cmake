# FindxxHash: the xxHash library as the imported target xxHash::xxhash (the name xxHash's own
# CMake package uses, so a system that ships xxHashConfig.cmake gives the same target).
#
# Used by embcache's own build and installed next to embcacheConfig.cmake, which calls
# find_dependency(xxHash). Tries xxHash's CMake package first, then pkg-config hints
# (libxxhash.pc) with find_path / find_library.
#
# Result variables: xxHash_FOUND, xxHash_VERSION (when known), XXHASH_INCLUDE_DIR and
# XXHASH_LIBRARY (cache entries; embcache's tests and fuzzers use them directly).
find_package(xxHash CONFIG QUIET)
if(TARGET xxHash::xxhash)
  if(NOT XXHASH_LIBRARY)
    set(XXHASH_LIBRARY xxHash::xxhash)
  endif()
  get_target_property(_emc_xxh_inc xxHash::xxhash INTERFACE_INCLUDE_DIRECTORIES)
  if(_emc_xxh_inc AND NOT XXHASH_INCLUDE_DIR)
    set(XXHASH_INCLUDE_DIR "${_emc_xxh_inc}")
  endif()
  include(FindPackageHandleStandardArgs)
  if(xxHash_CONFIG)
    find_package_handle_standard_args(xxHash CONFIG_MODE)
  else() # the target was there already: an earlier find_package(embcache) made it, or the
         # project did (a vendored xxHash); CONFIG_MODE would fail without a config file
    find_package_handle_standard_args(xxHash REQUIRED_VARS XXHASH_LIBRARY)
  endif()
  return()
endif()

find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(PC_XXHASH QUIET libxxhash)
endif()
find_path(XXHASH_INCLUDE_DIR xxhash.h HINTS ${PC_XXHASH_INCLUDE_DIRS})
find_library(XXHASH_LIBRARY NAMES xxhash HINTS ${PC_XXHASH_LIBRARY_DIRS})
if(PC_XXHASH_VERSION)
  set(xxHash_VERSION "${PC_XXHASH_VERSION}")
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(xxHash
  REQUIRED_VARS XXHASH_LIBRARY XXHASH_INCLUDE_DIR
  VERSION_VAR xxHash_VERSION)

if(xxHash_FOUND AND NOT TARGET xxHash::xxhash)
  add_library(xxHash::xxhash UNKNOWN IMPORTED)
  set_target_properties(xxHash::xxhash PROPERTIES
    IMPORTED_LOCATION "${XXHASH_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${XXHASH_INCLUDE_DIR}")
endif()
mark_as_advanced(XXHASH_INCLUDE_DIR XXHASH_LIBRARY)
