set terminal pngcairo size 2170,560 font 'sans,10'
set output 'plots/phases.png'
set title 'Where the time goes: share of busy time per phase (trainer: gather, pack; inference: transfer, process, verify)'
set ylabel '% of the summed phase times'
set style data histograms
set style fill solid 0.85 border -1
set boxwidth 0.9
set grid ytics
set key outside right top
set xtics rotate by -25 left noenhanced
set datafile missing '-'
set style histogram rowstacked
set yrange [0:100]
plot 'plots/phases.dat' using 2:xtic(1) title 'gather', '' using 3 title 'pack', '' using 4 title 'transfer', '' using 5 title 'process', '' using 6 title 'verify'
