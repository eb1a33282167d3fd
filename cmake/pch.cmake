# Precompiled headers (QREPACK_PCH), used by make test's clang build (scripts/test.sh) and the
# fuzz build (scripts/fuzz.sh): with line tables only, the clang fuzz build took 429 s instead of
# 610 s; g++'s sanitized test build gained nothing measurable (docs/development.md).
# The standard headers most files include, fmt and nlohmann_json (library and CLI), CLI11 (CLI)
# and gtest (tests). The -ffp-contract=off sources (the qrepack_no_contract object library) do
# not use them, so their arithmetic is compiled exactly as the release build compiles it.
set(QREPACK_PCH_COMMON <algorithm> <array> <cmath> <cstdint> <cstring> <filesystem> <map>
  <memory> <optional> <span> <string> <string_view> <vector> <fmt/format.h>
  <nlohmann/json.hpp>)
target_precompile_headers(qrepack PRIVATE ${QREPACK_PCH_COMMON})
target_precompile_headers(qrepack_cli PRIVATE ${QREPACK_PCH_COMMON} <CLI/CLI.hpp>)
if(TARGET qrepack_tests)
  target_precompile_headers(qrepack_tests PRIVATE ${QREPACK_PCH_COMMON} <gtest/gtest.h>)
  set_source_files_properties(${QREPACK_MODEL_TEST_SOURCES} PROPERTIES
    SKIP_PRECOMPILE_HEADERS ON)
endif()
