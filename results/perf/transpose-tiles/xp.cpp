// Transpose experiment: tile shapes, prefetch hints and store kinds, vs memcpy, median over reps.
#include "xp_common.hpp"
template<int TJ> __attribute__((target("avx2"),noinline)) void tile(const uint16_t* a, uint16_t* b){
  for (int i=0;i<32;i+=16) for (int j=0;j<TJ;j+=8) t16x8(a+i+j*32,32,b+i*TJ+j,TJ); }
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
  return run_shapes(reps, [](Variants& vs, uint16_t* s, uint16_t* t, int64_t I, int64_t J, int64_t ss, int64_t ds) {
#define V(TJ,H,NT,M,P) vs.push_back({"TJ" #TJ " h" #H " nt" #NT " mode" #M " pfd" #P, [=]{tr<TJ,H,NT,M,P>(s,t,I,J,ss,ds);}});
    V(128,0,1,0,0) V(128,1,1,0,0) V(64,0,1,0,0) V(64,1,1,0,0) V(128,0,0,0,0) V(64,0,0,0,0)
    V(128,0,1,1,0) V(128,0,1,1,16) V(128,1,1,1,32) V(128,1,1,1,64) V(64,1,1,1,32) V(128,0,0,1,16) V(256,1,1,0,0) V(128,2,1,0,0) V(64,2,1,0,0) V(32,0,1,0,0) V(128,0,1,1,8) V(64,0,1,1,16)
  });
}
