set terminal pngcairo size 2170,560 font 'sans,10'
set output 'plots/time-per-engine.png'
set title 'Sync time per engine (mean over timed syncs, every byte verified)'
set ylabel 'seconds per sync (log scale)'
set style data histograms
set style fill solid 0.85 border -1
set boxwidth 0.9
set grid ytics
set key outside right top
set xtics rotate by -25 left noenhanced
set datafile missing '-'
set logscale y
plot 'plots/time-per-engine.dat' using 2:xtic(1) title 'broadcast', '' using 3 title 'v1', '' using 4 title 'v2', '' using 5 title 'v3', '' using 6 title 'v4', '' using 7 title 'peer:bucketed-ipc', '' using 8 title 'peer:ipc-per-tensor'
