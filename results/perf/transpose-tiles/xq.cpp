// Transpose experiment, wider tiles: TI source elements per row (TI/32 lines) x TJ rows, vs memcpy, median over reps.
#include "xp_common.hpp"
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
  return run_shapes(reps, [](Variants& vs, uint16_t* s, uint16_t* t, int64_t I, int64_t J, int64_t ss, int64_t ds) {
#define V(TI,TJ,H) vs.push_back({"TI" #TI " TJ" #TJ " h" #H, [=]{tr<TI,TJ,H>(s,t,I,J,ss,ds);}});
    V(32,64,0) V(32,128,0) V(64,32,0) V(64,64,0) V(128,32,0) V(128,64,0) V(256,32,0) V(128,16,0) V(64,64,1) V(128,32,1) V(128,64,1)
  });
}
