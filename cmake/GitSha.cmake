# Run at build time (cmake -P): writes OUT with the commit results name, rewriting it only
# when it changed, so that every build records the tree it was built from (a configure-time
# value goes stale as commits land). In order:
#   - SHARDSYNC_COMMIT in the environment (a caller that knows better);
#   - SRC's own git repository: its HEAD, with "-dirty" when tracked files differ from it;
#     never the commit of a repository that merely encloses SRC (a copy of the tree inside
#     another checkout);
#   - SRC/.shardsync-commit, written by the script that copied the tree (make stamp);
#   - "unknown".
set(sha "")
if(DEFINED ENV{SHARDSYNC_COMMIT})
  set(sha $ENV{SHARDSYNC_COMMIT})
else()
  execute_process(COMMAND git rev-parse --show-toplevel WORKING_DIRECTORY ${SRC}
                  OUTPUT_VARIABLE top OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  set(own_repo OFF)
  if(top)
    file(REAL_PATH "${top}" top_real)
    file(REAL_PATH "${SRC}" src_real)
    if(top_real STREQUAL src_real)
      set(own_repo ON)
    endif()
  endif()
  if(own_repo)
    execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY ${SRC}
                    OUTPUT_VARIABLE sha OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    execute_process(COMMAND git status --porcelain --untracked-files=no WORKING_DIRECTORY ${SRC}
                    OUTPUT_VARIABLE changes OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(sha AND changes)
      set(sha "${sha}-dirty")
    endif()
  elseif(EXISTS ${SRC}/.shardsync-commit)
    file(STRINGS ${SRC}/.shardsync-commit lines LIMIT_COUNT 1)
    string(STRIP "${lines}" sha)
  endif()
endif()
if(NOT sha)
  set(sha unknown)
endif()
set(text "#define SHARDSYNC_GIT_SHA \"${sha}\"\n")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT "${old}" STREQUAL "${text}")
  file(WRITE ${OUT} "${text}")
endif()
