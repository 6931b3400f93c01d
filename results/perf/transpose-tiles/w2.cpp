#include <emmintrin.h>
#include <immintrin.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <vector>
#include <algorithm>
#include <functional>
#include <sys/mman.h>

using namespace std;
static void* alloc(size_t n){ void* p=aligned_alloc(2<<20,(n+(2<<20)-1)/(2<<20)*(2<<20)); madvise(p,n,MADV_HUGEPAGE); memset(p,1,n); return p;}
static inline void nt_run(char* t, const char* s, size_t n){
  for (; n>=64; n-=64, t+=64, s+=64){ __m128i a=_mm_loadu_si128((const __m128i*)s), b=_mm_loadu_si128((const __m128i*)s+1), c=_mm_loadu_si128((const __m128i*)s+2), d=_mm_loadu_si128((const __m128i*)s+3);
    _mm_stream_si128((__m128i*)t,a);_mm_stream_si128((__m128i*)t+1,b);_mm_stream_si128((__m128i*)t+2,c);_mm_stream_si128((__m128i*)t+3,d);} }
template<int DIST, int HINT, int GROUP>
void var(const char* s, char* t, int64_t rows, int64_t run, int64_t ss){
  int64_t ahead = DIST/run;
  for (int64_t r=0;r<rows;r+=GROUP){
    for (int g=0; g<GROUP; ++g) {
      if (DIST && r+g+ahead<rows) { const char* p=s+(r+g+ahead)*ss; for (int64_t k=0;k<run;k+=64) { if(HINT==0)_mm_prefetch(p+k,_MM_HINT_T0); else if(HINT==1)_mm_prefetch(p+k,_MM_HINT_T1); else _mm_prefetch(p+k,_MM_HINT_NTA);} }
      nt_run(t+(r+g)*run, s+(r+g)*ss, run);
    }
  }
  _mm_sfence();
}

// Reads the runs without storing anything: what the memory system gives this pattern.
template<int DIST>
void read_only(const char* s, char* t, int64_t rows, int64_t run, int64_t ss){
  int64_t ahead = DIST/run; __m128i acc=_mm_setzero_si128();
  for (int64_t r=0;r<rows;++r){
    if (DIST && r+ahead<rows) { const char* p=s+(r+ahead)*ss; for (int64_t k=0;k<run;k+=64) _mm_prefetch(p+k,_MM_HINT_T1); }
    const __m128i* q=(const __m128i*)(s+r*ss);
    for (int64_t k=0;k<run/16;k+=4) acc=_mm_add_epi64(acc,_mm_xor_si128(_mm_xor_si128(_mm_loadu_si128(q+k),_mm_loadu_si128(q+k+1)),_mm_xor_si128(_mm_loadu_si128(q+k+2),_mm_loadu_si128(q+k+3))));
  }
  _mm_storeu_si128((__m128i*)t, acc);
}
int main(int argc,char**argv){
  int64_t run=atol(argv[1]), ss=atol(argv[2]); int reps=atoi(argv[3]);
  int64_t rows=(64<<20)/run; size_t sb=rows*ss, db=rows*run;
  char* s=(char*)alloc(sb); char* t=(char*)alloc(db); char* t2=(char*)alloc(db);
  auto tm=[&](auto f){ auto a=chrono::steady_clock::now(); f(); return chrono::duration<double>(chrono::steady_clock::now()-a).count(); };
  char* sc=(char*)alloc(db);  // the same bytes contiguous
  vector<pair<const char*, function<void()>>> vs = {
    {"contiguous runs pf8k t1", [&]{var<8192,1,1>(sc,t,rows,run,run);}},
    {"read only, strided, pf8k t1", [&]{read_only<8192>(s,t,rows,run,ss);}},
    {"read only, contiguous", [&]{read_only<0>(sc,t,rows,run,run);}},
    {"nopf", [&]{var<0,0,1>(s,t,rows,run,ss);}},
    {"pf8k t0", [&]{var<8192,0,1>(s,t,rows,run,ss);}},
    {"pf4k t0", [&]{var<4096,0,1>(s,t,rows,run,ss);}},
    {"pf16k t0", [&]{var<16384,0,1>(s,t,rows,run,ss);}},
    {"pf8k t1", [&]{var<8192,1,1>(s,t,rows,run,ss);}},
    {"pf16k t1", [&]{var<16384,1,1>(s,t,rows,run,ss);}},
    {"pf8k nta", [&]{var<8192,2,1>(s,t,rows,run,ss);}},
    {"pf32k t1", [&]{var<32768,1,1>(s,t,rows,run,ss);}},
    {"pf2k t0", [&]{var<2048,0,1>(s,t,rows,run,ss);}},
    {"pf4k t1", [&]{var<4096,1,1>(s,t,rows,run,ss);}},
  };
  vector<vector<double>> r(vs.size());
  for (int k=0;k<reps;++k){
    for (size_t v=0; v<vs.size(); ++v){ double m=tm([&]{memcpy(t2,t,db);}); double x=tm(vs[v].second); r[v].push_back(m/x); }
  }
  for (size_t v=0; v<vs.size(); ++v){ auto& q=r[v]; sort(q.begin(),q.end()); printf("%-28s median %3.0f%%  [%3.0f..%3.0f]\n", vs[v].first, 100*q[q.size()/2], 100*q[0], 100*q.back()); }
}
