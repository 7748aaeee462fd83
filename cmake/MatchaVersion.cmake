# SPDX-License-Identifier: MIT
# The commit matcha is built from, captured at configure time for `matcha --version`, snapshots and summary.json:
# MATCHA_GIT_COMMIT (full hash, or "unknown" outside a git checkout or without git) and MATCHA_GIT_DIRTY ("true" when
# tracked files differ from the commit, "false", or "unknown"). CMake configures again when HEAD or the index
# changes (a commit, a checkout, a `git add`), so a rebuild after committing does not report the previous commit;
# edits that were never staged show as dirty only from the next configure.
set(MATCHA_GIT_COMMIT "unknown")
set(MATCHA_GIT_DIRTY "unknown")
find_package(Git QUIET)
if(GIT_FOUND)
  execute_process(COMMAND "${GIT_EXECUTABLE}" rev-parse HEAD WORKING_DIRECTORY "${PROJECT_SOURCE_DIR}"
                  OUTPUT_VARIABLE commit RESULT_VARIABLE status OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(status EQUAL 0 AND commit MATCHES "^[0-9a-f]+$")
    set(MATCHA_GIT_COMMIT "${commit}")
    execute_process(COMMAND "${GIT_EXECUTABLE}" status --porcelain --untracked-files=no
                    WORKING_DIRECTORY "${PROJECT_SOURCE_DIR}" OUTPUT_VARIABLE changes RESULT_VARIABLE status
                    ERROR_QUIET)
    if(status EQUAL 0)
      if(changes STREQUAL "")
        set(MATCHA_GIT_DIRTY "false")
      else()
        set(MATCHA_GIT_DIRTY "true")
      endif()
    endif()
    execute_process(COMMAND "${GIT_EXECUTABLE}" rev-parse --absolute-git-dir WORKING_DIRECTORY "${PROJECT_SOURCE_DIR}"
                    OUTPUT_VARIABLE git_dir RESULT_VARIABLE status OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(status EQUAL 0)
      foreach(file HEAD index)
        if(EXISTS "${git_dir}/${file}")
          set_property(DIRECTORY "${PROJECT_SOURCE_DIR}" APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${git_dir}/${file}")
        endif()
      endforeach()
    endif()
  endif()
endif()
message(STATUS "matcha: version ${PROJECT_VERSION}, git commit ${MATCHA_GIT_COMMIT} (dirty: ${MATCHA_GIT_DIRTY})")
