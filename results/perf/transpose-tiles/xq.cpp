// Transpose experiment, wider tiles: TI source elements per row (TI/32 lines) x TJ rows, vs memcpy, median over reps.
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

inline void pf(const void* p, int h){ if(h==0)_mm_prefetch((const char*)p,_MM_HINT_T0); else _mm_prefetch((const char*)p,_MM_HINT_T1); }
template<int TI, int TJ> __attribute__((target("avx2"),noinline)) void tile(const uint16_t* a, uint16_t* b){
  for (int i=0;i<TI;i+=16) for (int j=0;j<TJ;j+=8) t16x8(a+i+j*TI,TI,b+i*TJ+j,TJ); }
// Tiles of TI x TJ: TJ source rows of TI elements (TI/32 lines each) gathered, transposed,
// written as TI destination runs of TJ elements; the next tile prefetched (T0 or T1) during the write.
template<int TI, int TJ, int HINT>
void tr(const uint16_t* s, uint16_t* t, int64_t I, int64_t J, int64_t ss, int64_t ds){
  alignas(64) static uint16_t A[TJ*TI], B[TI*TJ+2048];
  uint16_t* Bp = B + 2048;
  const int64_t nti=I/TI, nt=nti*(J/TJ);
  for (int64_t k=0;k<nt;++k){
    int64_t i0=(k%nti)*TI, j0=(k/nti)*TJ;
    for (int r=0;r<TJ;++r) memcpy(A+r*TI, s+(j0+r)*ss+i0, TI*2);
    tile<TI,TJ>(A,Bp);
    const bool more=k+1<nt; int64_t ni0=((k+1)%nti)*TI, nj0=((k+1)/nti)*TJ;
    int pr=0;
    for (int i=0;i<TI;++i){
      char* o=(char*)(t+(i0+i)*ds+j0); const char* q=(const char*)(Bp+i*TJ);
      for (int x=0;x<TJ*2;x+=16){ __m128i v=_mm_load_si128((const __m128i*)(q+x)); _mm_stream_si128((__m128i*)(o+x),v);} 
      if (!more) continue;
      for (; pr < TJ && pr*TI <= i*TJ; ++pr) { const char* p=(const char*)(s+(nj0+pr)*ss+ni0); for (int l=0;l<TI*2;l+=64) pf(p+l,HINT); }
    }
  }
  _mm_sfence();
}
int main(int argc,char**argv){
  int reps=argc>1?atoi(argv[1]):7;
  struct Shape{int64_t I,J,ss;}; Shape shapes[]={{2048,5120,16384},{5120,2048,5120}};
  for (auto sh: shapes){
    int64_t I=sh.I,J=sh.J,ss=sh.ss,ds=J; size_t sb=(size_t)ss*J*2, db=(size_t)I*J*2;
    auto* s=(uint16_t*)alloc(sb); auto* t=(uint16_t*)alloc(db); auto* t2=(uint16_t*)alloc(db);
    for (size_t k=0;k<sb/2;++k) s[k]=uint16_t(k*2654435761u>>7);
    int copies=max<int>(1,(64<<20)/db);
    auto tm=[&](const function<void()>& f){ auto a=chrono::steady_clock::now(); for(int c=0;c<copies;++c) f(); return chrono::duration<double>(chrono::steady_clock::now()-a).count(); };
    vector<pair<string,function<void()>>> vs;
#define V(TI,TJ,H) vs.push_back({"TI" #TI " TJ" #TJ " h" #H, [&]{tr<TI,TJ,H>(s,t,I,J,ss,ds);}});
    V(32,64,0) V(32,128,0) V(64,32,0) V(64,64,0) V(128,32,0) V(128,64,0) V(256,32,0) V(128,16,0) V(64,64,1) V(128,32,1) V(128,64,1)
    for (auto& v: vs){ memset(t,0,db); v.second(); for(int64_t i=0;i<I;i++) for(int64_t j=0;j<J;j++) if(t[i*ds+j]!=s[i+j*ss]){printf("%s WRONG\n",v.first.c_str());return 1;} }
    vector<vector<double>> r(vs.size()); vector<double> mc;
    for (int k=0;k<reps;++k) for (size_t v=0;v<vs.size();++v){ double m=tm([&]{memcpy(t2,t,db);}); double x=tm(vs[v].second); r[v].push_back(m/x); mc.push_back(copies*db/m/1e9);} 
    sort(mc.begin(),mc.end());
    printf("shape I=%ld J=%ld src stride %ld elements; memcpy median %.1f GB/s\n",I,J,ss,mc[mc.size()/2]);
    for (size_t v=0;v<vs.size();++v){ auto& q=r[v]; sort(q.begin(),q.end()); printf("  %-20s median %3.0f%%  [%3.0f..%3.0f]\n", vs[v].first.c_str(), 100*q[q.size()/2], 100*q[0], 100*q.back()); }
    free(s); free(t); free(t2);
  }
}
