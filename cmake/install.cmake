# Install rules (GNUInstallDirs): the qrepack binary with its man page and shell completions
# (component "bin"), the static library, its public headers, the exported CMake package
# (qrepack::qrepack) and qrepack.pc (component "dev"), and the documentation.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(QREPACK_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/qrepack)

install(TARGETS qrepack_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT bin)
install(FILES ${QREPACK_GENERATED_DOCS_DIR}/qrepack.1.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man1
        COMPONENT bin)
install(FILES ${QREPACK_GENERATED_DOCS_DIR}/qrepack.bash
        DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions RENAME qrepack
        COMPONENT bin)
install(FILES ${QREPACK_GENERATED_DOCS_DIR}/_qrepack
        DESTINATION ${CMAKE_INSTALL_DATADIR}/zsh/vendor-completions COMPONENT bin)
install(FILES README.md DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT bin)
install(DIRECTORY docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT bin)

install(TARGETS qrepack EXPORT qrepackTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev)
install(DIRECTORY include/qrepack DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev)
install(EXPORT qrepackTargets NAMESPACE qrepack:: DESTINATION ${QREPACK_CMAKE_DIR} COMPONENT dev)
configure_package_config_file(cmake/qrepackConfig.cmake.in
  ${CMAKE_BINARY_DIR}/qrepackConfig.cmake INSTALL_DESTINATION ${QREPACK_CMAKE_DIR})
# 0.x: a new minor version may change the API.
write_basic_package_version_file(${CMAKE_BINARY_DIR}/qrepackConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/qrepackConfig.cmake ${CMAKE_BINARY_DIR}/qrepackConfigVersion.cmake
        DESTINATION ${QREPACK_CMAKE_DIR} COMPONENT dev)

# qrepack.pc finds its prefix from its own location, so an unpacked or relocated tree works.
file(RELATIVE_PATH QREPACK_PC_PREFIX_REL ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig
     ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" QREPACK_PC_PREFIX_REL "${QREPACK_PC_PREFIX_REL}")
configure_file(cmake/qrepack.pc.in ${CMAKE_BINARY_DIR}/qrepack.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/qrepack.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
        COMPONENT dev)
