# FindxxHash — finds the xxHash library (XXH3 checksums) and defines the imported target
# xxHash::xxhash, the name xxHash's own CMake package uses.
#
# Result variables: xxHash_FOUND, xxHash_INCLUDE_DIR, xxHash_LIBRARY.
# Installed next to preemptConfig.cmake, so the installed package finds it the same way.
find_path(xxHash_INCLUDE_DIR xxhash.h)
find_library(xxHash_LIBRARY NAMES xxhash)

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(xxHash REQUIRED_VARS xxHash_LIBRARY xxHash_INCLUDE_DIR)
mark_as_advanced(xxHash_INCLUDE_DIR xxHash_LIBRARY)

if(xxHash_FOUND AND NOT TARGET xxHash::xxhash)
  add_library(xxHash::xxhash UNKNOWN IMPORTED)
  set_target_properties(xxHash::xxhash PROPERTIES
    IMPORTED_LOCATION "${xxHash_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${xxHash_INCLUDE_DIR}")
endif()
