// Shared by the transpose experiments (xp.cpp, xq.cpp): huge-page buffers, the AVX2 16 x 8
// register transpose of 16-bit elements, the prefetch hint by number, and the harness that
// checks each variant element by element and times it against memcpy on two Llama-4 shapes.
#pragma once
#include <emmintrin.h>
#include <immintrin.h>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>
#include <sys/mman.h>
using namespace std;
static void* alloc(size_t n){ void* p=aligned_alloc(2<<20,(n+(2<<20)-1)/(2<<20)*(2<<20)); madvise(p,n,MADV_HUGEPAGE); memset(p,1,n); return p;}
__attribute__((target("avx2"))) inline void t16x8(const uint16_t* s, int64_t ss, uint16_t* t, int64_t ds) {
  __m256i r[8], u[8], v[8];
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) r[k] = _mm256_loadu_si256((const __m256i*)(s + k * ss));
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) { u[k] = _mm256_unpacklo_epi16(r[2*k], r[2*k+1]); u[k+4] = _mm256_unpackhi_epi16(r[2*k], r[2*k+1]); }
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) { const __m256i* q = u + 4*h;
    __m256i b0 = _mm256_unpacklo_epi32(q[0], q[1]), b1 = _mm256_unpackhi_epi32(q[0], q[1]);
    __m256i b2 = _mm256_unpacklo_epi32(q[2], q[3]), b3 = _mm256_unpackhi_epi32(q[2], q[3]);
    v[4*h] = _mm256_unpacklo_epi64(b0, b2); v[4*h+1] = _mm256_unpackhi_epi64(b0, b2); v[4*h+2] = _mm256_unpacklo_epi64(b1, b3); v[4*h+3] = _mm256_unpackhi_epi64(b1, b3); }
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) { _mm_storeu_si128((__m128i*)(t + k*ds), _mm256_castsi256_si128(v[k])); _mm_storeu_si128((__m128i*)(t + (k+8)*ds), _mm256_extracti128_si256(v[k], 1)); }
}
inline void pf(const void* p, int h){ if(h==0)_mm_prefetch((const char*)p,_MM_HINT_T0); else if(h==1)_mm_prefetch((const char*)p,_MM_HINT_T1); else _mm_prefetch((const char*)p,_MM_HINT_T2); }
using Variants = vector<pair<string, function<void()>>>;
// add(vs, s, t, I, J, ss, ds) appends the variants for one shape (capturing by value).
template <class Add>
int run_shapes(int reps, Add add) {
  struct Shape{int64_t I,J,ss;}; Shape shapes[]={{2048,5120,16384},{5120,2048,5120}};
  for (auto sh: shapes){
    int64_t I=sh.I,J=sh.J,ss=sh.ss,ds=J; size_t sb=(size_t)ss*J*2, db=(size_t)I*J*2;
    auto* s=(uint16_t*)alloc(sb); auto* t=(uint16_t*)alloc(db); auto* t2=(uint16_t*)alloc(db);
    for (size_t k=0;k<sb/2;++k) s[k]=uint16_t(k*2654435761u>>7);
    int copies=max<int>(1,(64<<20)/db);
    auto tm=[&](const function<void()>& f){ auto a=chrono::steady_clock::now(); for(int c=0;c<copies;++c) f(); return chrono::duration<double>(chrono::steady_clock::now()-a).count(); };
    Variants vs;
    add(vs, s, t, I, J, ss, ds);
    for (auto& v: vs){ memset(t,0,db); v.second(); for(int64_t i=0;i<I;i++) for(int64_t j=0;j<J;j++) if(t[i*ds+j]!=s[i+j*ss]){printf("%s WRONG\n",v.first.c_str());return 1;} }
    vector<vector<double>> r(vs.size()); vector<double> mc;
    for (int k=0;k<reps;++k) for (size_t v=0;v<vs.size();++v){ double m=tm([&]{memcpy(t2,t,db);}); double x=tm(vs[v].second); r[v].push_back(m/x); mc.push_back(copies*db/m/1e9);} 
    sort(mc.begin(),mc.end());
    printf("shape I=%ld J=%ld src stride %ld elements; memcpy median %.1f GB/s\n",I,J,ss,mc[mc.size()/2]);
    for (size_t v=0;v<vs.size();++v){ auto& q=r[v]; sort(q.begin(),q.end()); printf("  %-28s median %3.0f%%  [%3.0f..%3.0f]\n", vs[v].first.c_str(), 100*q[q.size()/2], 100*q[0], 100*q.back()); }
    free(s); free(t); free(t2);
  }
  return 0;
}
