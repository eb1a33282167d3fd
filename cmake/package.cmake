# Debian packages with CPack (`make package`): "qrepack" (the binary, its man page, bash and
# zsh completions, the documentation) and "libqrepack-dev" (the static library, its headers,
# the CMake package and qrepack.pc). Configure with -DCMAKE_INSTALL_PREFIX=/usr so that
# GNUInstallDirs picks Debian's multiarch library directory (scripts/package.sh does).
include(GNUInstallDirs)

set(QREPACK_PACKAGE_MAINTAINER "qrepack maintainers <maintainers@qrepack.invalid>"
    CACHE STRING "The Maintainer field of the Debian packages")

# Each package's /usr/share/doc/<package>/ holds its copyright and changelog.Debian.gz.
string(TIMESTAMP QREPACK_CHANGELOG_DATE "%a, %d %b %Y %H:%M:%S +0000" UTC)
foreach(pkg IN ITEMS qrepack libqrepack-dev)
  set(dir ${CMAKE_BINARY_DIR}/debian/${pkg})
  file(MAKE_DIRECTORY ${dir})
  file(WRITE ${dir}/changelog.Debian
    "${pkg} (${PROJECT_VERSION}) unstable; urgency=medium\n\n"
    "  * Release ${PROJECT_VERSION}: see /usr/share/doc/qrepack/README.md.\n\n"
    " -- ${QREPACK_PACKAGE_MAINTAINER}  ${QREPACK_CHANGELOG_DATE}\n")
  execute_process(COMMAND gzip -9nf ${dir}/changelog.Debian RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "gzip failed on ${dir}/changelog.Debian")
  endif()
endforeach()
install(FILES cmake/debian/copyright ${CMAKE_BINARY_DIR}/debian/qrepack/changelog.Debian.gz
        DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/qrepack COMPONENT bin)
install(FILES cmake/debian/copyright ${CMAKE_BINARY_DIR}/debian/libqrepack-dev/changelog.Debian.gz
        DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/libqrepack-dev COMPONENT dev)

# cpack and `make install` build nothing themselves: scripts/package.sh builds the installed
# targets first, and the benchmarks the same release tree holds for make bench stay unbuilt.
set(CMAKE_SKIP_INSTALL_ALL_DEPENDENCY TRUE)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME qrepack)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY ${PROJECT_DESCRIPTION})
set(CPACK_PACKAGE_CONTACT ${QREPACK_PACKAGE_MAINTAINER})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_COMPONENTS_ALL bin dev)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER ${QREPACK_PACKAGE_MAINTAINER})
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)

set(CPACK_DEBIAN_BIN_PACKAGE_NAME qrepack)
set(CPACK_DEBIAN_BIN_PACKAGE_SECTION science)
# The shared libraries the binary links, with their versions, from dpkg-shlibdeps.
set(CPACK_DEBIAN_BIN_PACKAGE_SHLIBDEPS ON)
string(CONCAT CPACK_COMPONENT_BIN_DESCRIPTION "${PROJECT_DESCRIPTION}\n"
  "qrepack converts FP8 block-scaled, NVFP4 and BF16 checkpoints (GLM-MoE-DSA,\n"
  "DeepSeek-V3, Kimi-K2, MiniMax, Qwen3-MoE, Llama-style) into the colibri engine's\n"
  "int2/int3/int4/int8/fp8 containers, and Omega dit_svdquant_v1 packs into FlashRT's\n"
  "E0M3 weights: bit-exact, streaming and strictly validated, with synthetic fixtures,\n"
  "a reference forward pass (oracle, eval) and fidelity checks.")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME libqrepack-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
# What find_package(qrepack) and pkg-config --libs qrepack need to link the static library.
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS
  "libfmt-dev, libhwy-dev, libre2-dev, libxxhash-dev, zlib1g-dev, libssl-dev, libcurl4-openssl-dev, pkg-config")
string(CONCAT CPACK_COMPONENT_DEV_DESCRIPTION
  "static library and headers of qrepack (checkpoint repacking)\n"
  "Link qrepack::qrepack (find_package(qrepack)) or pkg-config's qrepack to read, plan,\n"
  "convert and verify model checkpoints from C++20.")

include(CPack)
