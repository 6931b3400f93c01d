# The hash of the sources a build compiles (apps/, lib/, kernels/, cmake/ and the top
# CMakeLists.txt): SHA-256 over each file's path and SHA-256, in path order, cut to 16 hex
# digits. `make stamp` writes it beside the commit in .shardsync-commit; GitSha.cmake
# recomputes it in a copy of the tree without its own repository and records
# "<commit>-stamp-mismatch" where the copy's sources are not the stamped ones.
#   cmake -DSRC=<tree> -P cmake/SourceHash.cmake    prints the hash
function(shardsync_source_hash src out)
  # A relative tree (make stamp passes "."), made absolute first: GLOB RELATIVE "." finds nothing.
  get_filename_component(src "${src}" ABSOLUTE)
  file(GLOB_RECURSE files RELATIVE ${src} ${src}/apps/* ${src}/lib/* ${src}/kernels/* ${src}/cmake/*)
  list(FILTER files EXCLUDE REGEX "(__pycache__|\\.pyc$)")
  list(APPEND files CMakeLists.txt)
  list(SORT files)
  set(all "")
  foreach(f IN LISTS files)
    if(EXISTS ${src}/${f})
      file(SHA256 ${src}/${f} h)
      string(APPEND all "${f} ${h}\n")
    endif()
  endforeach()
  string(SHA256 total "${all}")
  string(SUBSTRING "${total}" 0 16 total)
  set(${out} ${total} PARENT_SCOPE)
endfunction()

if(CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
  if(NOT SRC)
    message(FATAL_ERROR "SourceHash.cmake: give -DSRC=<source tree>")
  endif()
  shardsync_source_hash(${SRC} h)
  execute_process(COMMAND ${CMAKE_COMMAND} -E echo ${h})
endif()
