// Transpose experiment: tile shapes, prefetch hints and store kinds, vs memcpy, median over reps.
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
template<int TJ> __attribute__((target("avx2"),noinline)) void tile(const uint16_t* a, uint16_t* b){
  for (int i=0;i<32;i+=16) for (int j=0;j<TJ;j+=8) t16x8(a+i+j*32,32,b+i*TJ+j,TJ); }
inline void pf(const void* p, int h){ if(h==0)_mm_prefetch((const char*)p,_MM_HINT_T0); else if(h==1)_mm_prefetch((const char*)p,_MM_HINT_T1); else _mm_prefetch((const char*)p,_MM_HINT_T2); }
// MODE 0: gather tile, transpose, write (prefetching the next tile spread over the write)
// MODE 1: double buffer: the next tile's rows are loaded during the write; prefetch PFD rows ahead of those loads
template<int TJ, int HINT, bool NT, int MODE, int PFD>
void tr(const uint16_t* s, uint16_t* t, int64_t I, int64_t J, int64_t ss, int64_t ds){
  constexpr int TI=32;
  alignas(64) uint16_t buf[3*TJ*TI+4096];
  uint16_t* A[2]={buf, buf+TJ*TI+1024}; uint16_t* B=buf+2*TJ*TI+3072;
  const int64_t nti=I/TI, nt=nti*(J/TJ);
  auto gat=[&](uint16_t* a, int64_t k, int r){ int64_t i0=(k%nti)*TI, j0=(k/nti)*TJ; memcpy(a+r*TI, s+(j0+r)*ss+i0, 64);
    if (MODE==1 && PFD) { int rr=r+PFD; int64_t kk=k; if (rr>=TJ){rr-=TJ; kk++;} if (kk<nt) pf(s+((kk/nti)*TJ+rr)*ss+(kk%nti)*TI, HINT);} };
  if (MODE==1) for (int r=0;r<TJ;++r) gat(A[0],0,r);
  for (int64_t k=0;k<nt;++k){
    int64_t i0=(k%nti)*TI, j0=(k/nti)*TJ;
    uint16_t* a=A[MODE==1 ? (k&1) : 0];
    if (MODE==0) for (int r=0;r<TJ;++r) memcpy(a+r*TI, s+(j0+r)*ss+i0, 64);
    tile<TJ>(a,B);
    const bool more=k+1<nt; int64_t ni0=((k+1)%nti)*TI, nj0=((k+1)/nti)*TJ;
    for (int i=0;i<TI;++i){
      char* o=(char*)(t+(i0+i)*ds+j0); const char* q=(const char*)(B+i*TJ);
      for (int x=0;x<TJ*2;x+=16){ __m128i v=_mm_load_si128((const __m128i*)(q+x)); if(NT) _mm_stream_si128((__m128i*)(o+x),v); else _mm_storeu_si128((__m128i*)(o+x),v);} 
      if (!more) continue;
      for (int r=i*(TJ/TI); r<(i+1)*(TJ/TI); ++r) { if (MODE==0) pf(s+(nj0+r)*ss+ni0, HINT); else gat(A[(k+1)&1],k+1,r); }
    }
  }
  if (NT) _mm_sfence();
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
#define V(TJ,H,NT,M,P) vs.push_back({"TJ" #TJ " h" #H " nt" #NT " mode" #M " pfd" #P, [&]{tr<TJ,H,NT,M,P>(s,t,I,J,ss,ds);}});
    V(128,0,1,0,0) V(128,1,1,0,0) V(64,0,1,0,0) V(64,1,1,0,0) V(128,0,0,0,0) V(64,0,0,0,0)
    V(128,0,1,1,0) V(128,0,1,1,16) V(128,1,1,1,32) V(128,1,1,1,64) V(64,1,1,1,32) V(128,0,0,1,16) V(256,1,1,0,0) V(128,2,1,0,0) V(64,2,1,0,0) V(32,0,1,0,0) V(128,0,1,1,8) V(64,0,1,1,16)
    for (auto& v: vs){ memset(t,0,db); v.second(); for(int64_t i=0;i<I;i++) for(int64_t j=0;j<J;j++) if(t[i*ds+j]!=s[i+j*ss]){printf("%s WRONG\n",v.first.c_str());return 1;} }
    vector<vector<double>> r(vs.size()); vector<double> mc;
    for (int k=0;k<reps;++k) for (size_t v=0;v<vs.size();++v){ double m=tm([&]{memcpy(t2,t,db);}); double x=tm(vs[v].second); r[v].push_back(m/x); mc.push_back(copies*db/m/1e9);} 
    sort(mc.begin(),mc.end());
    printf("shape I=%ld J=%ld src stride %ld elements; memcpy median %.1f GB/s\n",I,J,ss,mc[mc.size()/2]);
    for (size_t v=0;v<vs.size();++v){ auto& q=r[v]; sort(q.begin(),q.end()); printf("  %-28s median %3.0f%%  [%3.0f..%3.0f]\n", vs[v].first.c_str(), 100*q[q.size()/2], 100*q[0], 100*q.back()); }
    free(s); free(t); free(t2);
  }
}
