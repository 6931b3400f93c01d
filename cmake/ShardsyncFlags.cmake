# Warning and sanitizer flags for shardsync's own targets (not for dependencies).
add_library(shardsync_flags INTERFACE)
set(_warn -Wall -Wextra -Wshadow -Wnon-virtual-dtor -Wpedantic)
if(SHARDSYNC_WERROR)
  list(APPEND _warn -Werror)
endif()
target_compile_options(shardsync_flags INTERFACE $<$<COMPILE_LANGUAGE:CXX>:${_warn}>)

if(SHARDSYNC_FUZZ)
  target_compile_options(shardsync_flags INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link>)
endif()
if(SHARDSYNC_SANITIZE)
  set(_san -fsanitize=${SHARDSYNC_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  target_compile_options(shardsync_flags INTERFACE $<$<COMPILE_LANGUAGE:CXX>:${_san}>)
  target_link_options(shardsync_flags INTERFACE ${_san})
endif()

# shardsync_target(name) applies the flags above and the include root.
function(shardsync_target name)
  target_link_libraries(${name} PRIVATE shardsync_flags)
endfunction()
