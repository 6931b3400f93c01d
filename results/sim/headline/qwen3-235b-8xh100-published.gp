set terminal pngcairo size 1000,520 font ",10"
set output 'results/sim/headline/qwen3-235b-8xh100-published.png'
set title "qwen3-235b-8xh100-published: shardsync predicted (costs: results/sim/h200/h200-qwen3-8b.json) vs published"
set style data histograms
set style fill solid 0.8 border -1
set boxwidth 0.7
set ylabel "sync time, s"
set xtics rotate by -30 left
set bmargin 9
set rmargin 22
set yrange [0:*]
set grid ytics
set key off
plot 'results/sim/headline/qwen3-235b-8xh100-published.dat' using 2:xtic(1) lc rgb "#4477aa"
