# Findliburing — finds liburing (io_uring userspace library) and defines the imported target
# liburing::liburing. Uses pkg-config for hints when it is available; works without it.
#
# Result variables: liburing_FOUND, liburing_INCLUDE_DIR, liburing_LIBRARY, liburing_VERSION.
# Installed next to preemptConfig.cmake, so the installed package finds it the same way.
find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(PC_liburing QUIET liburing)
endif()
find_path(liburing_INCLUDE_DIR liburing.h HINTS ${PC_liburing_INCLUDE_DIRS})
find_library(liburing_LIBRARY NAMES uring HINTS ${PC_liburing_LIBRARY_DIRS})
set(liburing_VERSION "${PC_liburing_VERSION}")

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(liburing
  REQUIRED_VARS liburing_LIBRARY liburing_INCLUDE_DIR
  VERSION_VAR liburing_VERSION)
mark_as_advanced(liburing_INCLUDE_DIR liburing_LIBRARY)

if(liburing_FOUND AND NOT TARGET liburing::liburing)
  add_library(liburing::liburing UNKNOWN IMPORTED)
  set_target_properties(liburing::liburing PROPERTIES
    IMPORTED_LOCATION "${liburing_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${liburing_INCLUDE_DIR}")
endif()
