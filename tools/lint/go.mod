module github.com/novaedge/novaedge/tools/lint

go 1.26.0
