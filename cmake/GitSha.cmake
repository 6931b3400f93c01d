# Run at build time (cmake -P): writes OUT with the commit results name, rewriting it only
# when the commit changed, so that every build records the tree it was built from (a
# configure-time value goes stale as commits land). SHARDSYNC_COMMIT (environment) overrides
# git: the GPU host's copy of the tree carries a stale .git HEAD.
if(DEFINED ENV{SHARDSYNC_COMMIT})
  set(sha $ENV{SHARDSYNC_COMMIT})
else()
  execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY ${SRC}
                  OUTPUT_VARIABLE sha OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
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
