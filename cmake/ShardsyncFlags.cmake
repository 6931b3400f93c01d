# Warning and sanitizer flags for shardsync's own targets (not for dependencies).
add_library(shardsync_flags INTERFACE)
set(_warn -Wall -Wextra -Wshadow -Wnon-virtual-dtor -Wpedantic)
if(SHARDSYNC_WERROR)
  list(APPEND _warn -Werror)
endif()
target_compile_options(shardsync_flags INTERFACE $<$<COMPILE_LANGUAGE:CXX>:${_warn}>)

# SHARDSYNC_FUZZ's coverage instrumentation (-fsanitize=fuzzer-no-link) goes on the fuzzers and
# the libraries they link only (tests/fuzz/CMakeLists.txt), so one clang ASan+UBSan build serves
# both make test-asan and the fuzzers without instrumenting the engine for them.
if(SHARDSYNC_SANITIZE)
  set(_san -fsanitize=${SHARDSYNC_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  target_compile_options(shardsync_flags INTERFACE $<$<COMPILE_LANGUAGE:CXX>:${_san}>)
  target_link_options(shardsync_flags INTERFACE ${_san})
endif()

# shardsync_target(name) applies the flags above and the include root.
function(shardsync_target name)
  target_link_libraries(${name} PRIVATE shardsync_flags)
endfunction()
