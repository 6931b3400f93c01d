# Run at build time (cmake -P): writes OUT with the commit results name, rewriting it only
# when it changed, so that every build records the tree it was built from (a configure-time
# value goes stale as commits land). No environment variable overrides it. In order:
#   - SRC's own git repository: its HEAD, with "-dirty" when tracked files differ from it;
#     never the commit of a repository that merely encloses SRC (a copy of the tree inside
#     another checkout);
#   - SRC/.shardsync-commit, written by `make stamp` before the tree was copied: the commit,
#     then "sources <hash>" (SourceHash.cmake). The hash is checked against the copy's own
#     sources: a stamp on other sources (the tree changed after stamping, or a stamp carried
#     to another tree) records "<commit>-stamp-mismatch";
#   - "unknown".
include(${CMAKE_CURRENT_LIST_DIR}/SourceHash.cmake)
set(sha "")
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
  file(STRINGS ${SRC}/.shardsync-commit lines LIMIT_COUNT 2)
  list(LENGTH lines n)
  if(n GREATER 0)
    list(GET lines 0 sha)
    string(STRIP "${sha}" sha)
    set(stamped "")
    if(n GREATER 1)
      list(GET lines 1 second)
      string(REGEX REPLACE "^sources ([0-9a-f]+)$" "\\1" stamped "${second}")
    endif()
    shardsync_source_hash(${SRC} here)
    if(sha AND NOT stamped STREQUAL here)
      set(sha "${sha}-stamp-mismatch")
    endif()
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
