#!/bin/bash
# Transpose and strided-run copy experiments (one core), for the fast CPU copy's design.
cd "$(dirname "$0")"
g++ -O2 -std=c++20 -o xp xp.cpp && g++ -O2 -std=c++20 -o w2 w2.cpp && g++ -O2 -std=c++20 -o xd xd.cpp || exit 1
lscpu | grep -E "Model name|L1d|L2|L3"
echo "== transposes (Llama-4 expert shapes, bf16)"; ./xp ${1:-9}
echo "== 768-byte runs from 3072-byte rows (expert w2)"; ./w2 768 3072 ${1:-9}
echo "== where to transpose (Llama-4 gate_up chunk pieces)"; ./xd ${1:-9}
