// Where to transpose: a Llama-4 gate_up piece (384 source columns of 5120 rows, rows 32 KiB
// apart; the engines' chunk piece) goes source -> chunk -> destination. Either the pack
// transposes (reading the sparse source) and the unpack copies the chunk, or the pack copies
// runs of source rows into a chunk in source order and the unpack transposes from that dense
// chunk; or one step stages source rows in an L2 buffer. Each step over 17 pieces (64 MiB) as
// % of memcpy of the same bytes timed just before it; a pipeline as % of two memcpys.
#include "xp_common.hpp"
constexpr int64_t I = 384, J = 5120, SS = 16384, DS = J;
template<int TJ> __attribute__((target("avx2"),noinline)) void tile(const uint16_t* a, uint16_t* b){
  for (int i=0;i<32;i+=16) for (int j=0;j<TJ;j+=8) t16x8(a+i+j*32,32,b+i*TJ+j,TJ); }
// dst[i*DS + j] = s[i + j*ss]: 32 x TJ tiles gathered into L1, row blocks outer. PF 0: the
// next tile's lines (the library's kernel before), 1: the next row block's bytes in order (dense
// sources: they are one contiguous span), spread over this block's tiles.
template<int TJ, int PF>
void tr(const uint16_t* s, int64_t ss, uint16_t* t){
  alignas(64) static uint16_t A[TJ*32], B[32*TJ+2048];
  uint16_t* Bp=B+2048;
  const int64_t nti=I/32, blk=TJ*ss*2, per=(blk/nti+63)/64*64;
  for (int64_t j0=0;j0<J;j0+=TJ) for (int64_t i0=0;i0<I;i0+=32){
    for (int r=0;r<TJ;++r) memcpy(A+r*32, s+(j0+r)*ss+i0, 64);
    tile<TJ>(A,Bp);
    int64_t pi=i0+32, pj=j0; if (pi==I) pi=0, pj+=TJ;
    const uint16_t* nx = PF==0 && pj<J ? s+pj*ss+pi : nullptr;
    const char* bp = PF==1 && j0+TJ<J ? (const char*)(s+(j0+TJ)*ss)+(i0/32)*per : nullptr;
    for (int i=0;i<32;++i){
      char* o=(char*)(t+(i0+i)*DS+j0); const char* q=(const char*)(Bp+i*TJ);
      for (int x=0;x<TJ*2;x+=16) _mm_stream_si128((__m128i*)(o+x),_mm_load_si128((const __m128i*)(q+x)));
      if (nx) for (int r=i*(TJ/32); r<(i+1)*(TJ/32); ++r) _mm_prefetch((const char*)(nx+r*ss),_MM_HINT_T0);
      if (bp) for (int64_t l=i*per/32/64*64; l<(i+1)*per/32/64*64; l+=64) _mm_prefetch(bp+l,_MM_HINT_T0);
    }
  }
  _mm_sfence();
}
// The same with 32-byte moves (AVX2) for the gather and the write-out: half the loads and
// stores of the 16-byte ones. DIRECT: no gather; the register transposes load the source rows
// themselves, both halves of a row's line one after the other (the library's kernel now).
template<int TJ, bool DIRECT = false>
__attribute__((target("avx2"))) void tr256(const uint16_t* s, int64_t ss, uint16_t* t){
  alignas(64) static uint16_t A[TJ*32], B[32*TJ+2048];
  uint16_t* Bp=B+2048;
  for (int64_t j0=0;j0<J;j0+=TJ) for (int64_t i0=0;i0<I;i0+=32){
    if (DIRECT) {
      for (int j=0;j<TJ;j+=8) for (int i=0;i<32;i+=16) t16x8(s+(j0+j)*ss+i0+i,ss,Bp+i*TJ+j,TJ);
    } else {
      for (int r=0;r<TJ;++r){ const __m256i* q=(const __m256i*)(s+(j0+r)*ss+i0); __m256i x=_mm256_loadu_si256(q), y=_mm256_loadu_si256(q+1);
        _mm256_store_si256((__m256i*)(A+r*32),x); _mm256_store_si256((__m256i*)(A+r*32)+1,y); }
      tile<TJ>(A,Bp);
    }
    int64_t pi=i0+32, pj=j0; if (pi==I) pi=0, pj+=TJ;
    const uint16_t* nx = pj<J ? s+pj*ss+pi : nullptr;
    for (int i=0;i<32;++i){
      __m256i* o=(__m256i*)(t+(i0+i)*DS+j0); const __m256i* q=(const __m256i*)(Bp+i*TJ);
      for (int x=0;x<TJ/16;++x) _mm256_stream_si256(o+x,_mm256_load_si256(q+x));
      if (nx) for (int r=i*(TJ/32); r<(i+1)*(TJ/32); ++r) _mm_prefetch((const char*)(nx+r*ss),_MM_HINT_T0);
    }
  }
  _mm_sfence();
}
// Staged: a block of TJ source rows' 768-byte runs copied into an L2 buffer (rows 768 + 64
// bytes apart), then transposed from there.
template<int TJ>
void staged(const uint16_t* s, uint16_t* t){
  constexpr int64_t st_ss = I + 32;
  static uint16_t* st = (uint16_t*)aligned_alloc(4096, TJ*st_ss*2);
  alignas(64) static uint16_t A[TJ*32], B[32*TJ+2048];
  uint16_t* Bp=B+2048;
  for (int64_t j0=0;j0<J;j0+=TJ){
    for (int r=0;r<TJ;++r){ const char* p=(const char*)(s+(j0+r+8)*SS); if (j0+r+8<J) for(int l=0;l<I*2;l+=64) _mm_prefetch(p+l,_MM_HINT_T1); memcpy(st+r*st_ss, s+(j0+r)*SS, I*2); }
    for (int64_t i0=0;i0<I;i0+=32){
      for (int r=0;r<TJ;++r) memcpy(A+r*32, st+r*st_ss+i0, 64);
      tile<TJ>(A,Bp);
      for (int i=0;i<32;++i){ char* o=(char*)(t+(i0+i)*DS+j0); const char* q=(const char*)(Bp+i*TJ);
        for (int x=0;x<TJ*2;x+=16) _mm_stream_si128((__m128i*)(o+x),_mm_load_si128((const __m128i*)(q+x))); }
    }
  }
  _mm_sfence();
}
// Runs of source rows into the chunk in source order (the library's run copy: prefetch into
// L2 about 8 KiB ahead, streaming stores).
void runs(const uint16_t* s, uint16_t* c){
  const int ahead = 8192/(I*2)+1;
  for (int64_t j=0;j<J;++j){
    if (j+ahead<J){ const char* p=(const char*)(s+(j+ahead)*SS); for(int l=0;l<I*2;l+=64) _mm_prefetch(p+l,_MM_HINT_T1); }
    const __m128i* a=(const __m128i*)(s+j*SS); __m128i* b=(__m128i*)(c+j*I);
    for (int x=0;x<I*2/16;++x) _mm_stream_si128(b+x,_mm_loadu_si128(a+x));
  }
  _mm_sfence();
}
int main(int argc,char**argv){
  const int reps=argc>1?atoi(argv[1]):9, pieces=(64<<20)/(I*J*2);
  const size_t pb=(size_t)I*J*2, sb=(size_t)SS*J*2, all=pb*pieces;
  auto* S=(uint16_t*)alloc(sb); for (size_t k=0;k<sb/2;++k) S[k]=uint16_t(k*2654435761u>>7);
  auto* C=(uint16_t*)alloc(all); auto* D=(uint16_t*)alloc(all); auto* M=(uint16_t*)alloc(all);
  auto src=[&](int p){ return S+(p*I)%(SS-I); };
  auto chunk=[&](int p){ return C+p*(pb/2); }; auto dst=[&](int p){ return D+p*(pb/2); };
  for (int p=0;p<pieces;++p) runs(src(p),chunk(p));  // the dense chunks the unpack-side transposes read
  using Step=function<void(int)>;
  vector<pair<string,Step>> steps={
    {"pack: transpose from source, 32x128", [&](int p){ tr<128,0>(src(p),SS,dst(p)); }},
    {"pack: transpose from source, 32x64",  [&](int p){ tr<64,0>(src(p),SS,dst(p)); }},
    {"pack: transpose, 32x128, 32-byte moves", [&](int p){ tr256<128>(src(p),SS,dst(p)); }},
    {"pack: direct, 32-byte moves",        [&](int p){ tr256<128,true>(src(p),SS,dst(p)); }},
    {"pack: direct, 32x64",                [&](int p){ tr256<64,true>(src(p),SS,dst(p)); }},
    {"pack: staged transpose, 32x128",      [&](int p){ staged<128>(src(p),dst(p)); }},
    {"unpack: copy of the chunk",           [&](int p){ memcpy(dst(p),chunk(p),pb); }},
    {"pack: runs into source order",        [&](int p){ runs(src(p),M+p*(pb/2)); }},
    {"unpack: transpose from chunk, 32x128",[&](int p){ tr<128,0>(chunk(p),I,dst(p)); }},
    {"unpack: transpose from chunk, 32x64", [&](int p){ tr<64,0>(chunk(p),I,dst(p)); }},
    {"unpack: from chunk, 32-byte moves",  [&](int p){ tr256<128>(chunk(p),I,dst(p)); }},
    {"unpack: from chunk, direct, 32-byte", [&](int p){ tr256<128,true>(chunk(p),I,dst(p)); }},
    {"unpack: from chunk, direct, 32x64",  [&](int p){ tr256<64,true>(chunk(p),I,dst(p)); }},
    {"unpack: from chunk, block prefetch",  [&](int p){ tr<128,1>(chunk(p),I,dst(p)); }},
  };
  for (auto& st: steps) if (st.first.find("transpose")!=string::npos){
    memset(D,0,pb); st.second(0); const uint16_t* s0=src(0);
    for (int64_t i=0;i<I;i++) for (int64_t j=0;j<J;j++) if (D[i*DS+j]!=s0[i+j*SS]) { printf("%s WRONG\n",st.first.c_str()); return 1; } }
  runs(src(1),M); if (memcmp(M,chunk(1),pb)) { printf("runs WRONG\n"); return 1; }
  auto tm=[&](const function<void()>& f){ auto a=chrono::steady_clock::now(); f(); return chrono::duration<double>(chrono::steady_clock::now()-a).count(); };
  vector<vector<double>> r(steps.size()), rt(steps.size());  // ratio, seconds per memcpy-second
  vector<double> mc;
  for (int k=0;k<reps;++k) for (size_t v=0;v<steps.size();++v){
    double m=tm([&]{ memcpy(M,D,all); }); double x=tm([&]{ for(int p=0;p<pieces;++p) steps[v].second(p); });
    r[v].push_back(m/x); mc.push_back(all/m/1e9); }
  sort(mc.begin(),mc.end());
  printf("piece %ld x %ld (source rows %ld elements apart), %d pieces; memcpy median %.1f GB/s\n",I,J,SS,pieces,mc[mc.size()/2]);
  auto med=[](vector<double> q){ sort(q.begin(),q.end()); return q[q.size()/2]; };
  for (size_t v=0;v<steps.size();++v){ auto q=r[v]; sort(q.begin(),q.end()); printf("  %-38s median %3.0f%%  [%3.0f..%3.0f]\n", steps[v].first.c_str(), 100*q[q.size()/2], 100*q[0], 100*q.back()); }
  // Pipelines from the per-repetition ratios: two memcpys' time over the two steps' time.
  auto pipe=[&](int a,int b){ vector<double> q; for (int k=0;k<reps;++k) q.push_back(2/(1/r[a][k]+1/r[b][k])); return med(q); };
  // Each pack-side transpose with the chunk's copy; each unpack-side one with the runs.
  int copy=-1, run=-1; for (size_t v=0;v<steps.size();++v){ if (steps[v].first=="unpack: copy of the chunk") copy=int(v); if (steps[v].first=="pack: runs into source order") run=int(v); }
  printf("  pipelines, %% of two memcpys:\n");
  for (size_t v=0;v<steps.size();++v) if (steps[v].first.find("transpose")!=string::npos || steps[v].first.find("direct")!=string::npos)
    printf("    %-38s + %-28s %3.0f%%\n", steps[v].first.c_str(), steps[steps[v].first[0]=='p'?copy:run].first.c_str(), 100*pipe(int(v), steps[v].first[0]=='p'?copy:run));
}
