# Precompiled headers (QREPACK_PCH), used by scripts/fuzz.sh's clang build: with line tables
# only it took 429 s instead of 610 s; g++'s sanitized test build gained nothing measurable.
# The standard headers most files include, fmt and nlohmann_json (library and CLI), CLI11 (CLI)
# and gtest (tests). Files compiled with their own -ffp-contract=off do not use them, so their
# arithmetic is compiled exactly as the release build compiles it.
set(QREPACK_PCH_COMMON <algorithm> <array> <cmath> <cstdint> <cstring> <filesystem> <map>
  <memory> <optional> <span> <string> <string_view> <vector> <fmt/format.h>
  <nlohmann/json.hpp>)
target_precompile_headers(qrepack PRIVATE ${QREPACK_PCH_COMMON})
target_precompile_headers(qrepack_cli PRIVATE ${QREPACK_PCH_COMMON} <CLI/CLI.hpp>)
if(TARGET qrepack_tests)
  target_precompile_headers(qrepack_tests PRIVATE ${QREPACK_PCH_COMMON} <gtest/gtest.h>)
endif()
set_source_files_properties(${QREPACK_NO_CONTRACT_SOURCES} PROPERTIES
  SKIP_PRECOMPILE_HEADERS ON)
