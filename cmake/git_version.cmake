# Writes the commit this tree is at and whether it has uncommitted changes into OUT (from IN),
# only when they changed, so `qrepack --version` names the commit that built it. Run at every
# build by the qrepack_git_version target; outside a git checkout the commit is "unknown".
execute_process(COMMAND git -C "${SRC}" rev-parse HEAD
                OUTPUT_VARIABLE QREPACK_GIT_COMMIT RESULT_VARIABLE rc
                OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT rc EQUAL 0 OR QREPACK_GIT_COMMIT STREQUAL "")
  set(QREPACK_GIT_COMMIT "unknown")
  set(QREPACK_GIT_STATE "not a git checkout")
else()
  execute_process(COMMAND git -C "${SRC}" status --porcelain --untracked-files=no
                  OUTPUT_VARIABLE changes RESULT_VARIABLE rc ERROR_QUIET)
  if(NOT rc EQUAL 0)
    set(QREPACK_GIT_STATE "state unknown")
  elseif(changes STREQUAL "")
    set(QREPACK_GIT_STATE "clean")
  else()
    set(QREPACK_GIT_STATE "dirty")
  endif()
endif()
configure_file("${IN}" "${OUT}" @ONLY)
