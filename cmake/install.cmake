# cmake/install.cmake - `cmake --install` rules: the public headers, the
# library, the spattn command line (where built) and the CMake package
# (spattnConfig.cmake, its version file and the exported spattn::spattn
# target), so that an application uses
#   find_package(spattn REQUIRED)
#   target_link_libraries(app PRIVATE spattn::spattn)
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(SPATTN_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/spattn)

add_library(spattn::spattn ALIAS spattn)  # the same name inside this build tree
# spattn/detail holds the pattern kinds (src/pattern/terms/), which
# spattn/pattern_terms.hpp includes as "pattern/terms/...".
target_include_directories(spattn PUBLIC $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
                                         $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/spattn/detail>)
set_target_properties(spattn PROPERTIES EXPORT_NAME spattn)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/spattn DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.hpp")
install(DIRECTORY ${PROJECT_SOURCE_DIR}/src/pattern/terms DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/spattn/detail/pattern
        FILES_MATCHING PATTERN "*.hpp")
install(TARGETS spattn EXPORT spattnTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
if(TARGET spattn_cli)
  install(TARGETS spattn_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
install(EXPORT spattnTargets NAMESPACE spattn:: DESTINATION ${SPATTN_INSTALL_CMAKEDIR})

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/spattnConfig.cmake.in
  ${PROJECT_BINARY_DIR}/spattnConfig.cmake INSTALL_DESTINATION ${SPATTN_INSTALL_CMAKEDIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/spattnConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/spattnConfig.cmake ${PROJECT_BINARY_DIR}/spattnConfigVersion.cmake
        DESTINATION ${SPATTN_INSTALL_CMAKEDIR})
