# The controller's image, for those who build with docker or podman: `docker build -t
# tidegate-controller .`. `make image` builds the image without either (hack/image: the same build
# flags, an empty base, user 65532, plus the OCI labels of the version and revision, which this
# file does not set). This file is not exercised by the project's tests: none can run docker here.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -buildvcs=true -ldflags="-s -w -buildid=" -o /tidegate-controller ./cmd/tidegate-controller

FROM scratch
COPY --from=build --chmod=0555 /tidegate-controller /tidegate-controller
USER 65532:65532
ENTRYPOINT ["/tidegate-controller"]
